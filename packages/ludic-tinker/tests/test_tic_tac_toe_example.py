"""Smoke run of ``examples/tic_tac_toe/train_tinker.py`` against the loopback fake Tinker service.

The example's ``main`` runs unmodified (real tinker SDK, real ``TinkerTrainer``, real agent and env);
only the tokenizer is the fake service's byte tokenizer, with a plain-text chat template, because the
fake model's vocabulary is bytes (and a real base model's tokenizer would come from the Hub). The
first test starts the fake itself so it can inspect what the service received; the second is the
user's dry run, ``--fake-service``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ludic_tinker.testing import (
    FAKE_API_KEY,
    FAKE_BASE_MODEL,
    ByteChatTemplate,
    FakeTinkerService,
    FakeTokenizer,
)

pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "tic_tac_toe"


def _load_example() -> ModuleType:
    sys.path.insert(0, str(EXAMPLE_DIR))
    spec = importlib.util.spec_from_file_location("ttt_train_tinker", EXAMPLE_DIR / "train_tinker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_train_tinker_runs_two_grpo_steps_on_the_service(
    fake_service: FakeTinkerService, tokenizer: FakeTokenizer, tmp_path: Path
) -> None:
    example = _load_example()
    metrics = tmp_path / "metrics.jsonl"
    args = example.parse_args(
        [
            "--base-model",
            FAKE_BASE_MODEL,
            "--base-url",
            fake_service.base_url,
            "--train-steps",
            "2",
            "--group-size",
            "2",
            "--rollouts-per-update",
            "4",
            "--max-steps-per-episode",
            "2",
            "--max-completion-tokens",
            "8",
            "--lora-rank",
            "4",
            "--eval-every",
            "2",
            "--eval-episodes",
            "2",
            "--timeout-s",
            "60",
            "--metrics",
            str(metrics),
        ]
    )
    results = await example.main(
        args, api_key=FAKE_API_KEY, tokenizer=tokenizer, chat_template=ByteChatTemplate(tokenizer)
    )

    assert [r["step"] for r in results] == [1.0, 2.0]
    # Both steps reached the service: one forward_backward (the ppo loss) and one optim_step each.
    assert [call.loss_fn for call in fake_service.forward_backward_calls] == ["ppo", "ppo"]
    assert len(fake_service.optim_step_params) == 2
    assert fake_service.optim_step_params[0]["learning_rate"] == pytest.approx(args.lr)
    # Samplers for step 0 (first batch), 1 (second batch) and 2 (the eval after the last step).
    assert len(fake_service.sampler_ids) == 3
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 2]
    assert "eval/reward_mean" in lines[-1]
    assert sum(lines[-1][f"eval/{name}_rate"] for name in ("win", "draw", "loss", "illegal")) <= 1.0


async def test_fake_service_flag_dry_runs_the_recipe_offline(tmp_path: Path) -> None:
    example = _load_example()
    metrics = tmp_path / "metrics.jsonl"
    args = example.parse_args(
        [
            "--fake-service",
            "--train-steps",
            "1",
            "--group-size",
            "2",
            "--rollouts-per-update",
            "2",
            "--max-steps-per-episode",
            "2",
            "--max-completion-tokens",
            "8",
            "--eval-every",
            "1",
            "--eval-episodes",
            "2",
            "--timeout-s",
            "60",
            "--metrics",
            str(metrics),
        ]
    )
    # The default --base-model: the fake serves its tiny model under the recipe's own name.
    assert args.base_model == "Qwen/Qwen3-4B-Instruct-2507"
    results = await example.main(args)

    assert [r["step"] for r in results] == [1.0]
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 1]
    assert "eval/reward_mean" in lines[-1]


@pytest.mark.parametrize(
    ("flag", "value", "reason"),
    [
        ("--base-url", "http://127.0.0.1:1", "a loopback port of its own"),
        ("--tokenizer", "some/tokenizer", "vocabulary is bytes"),
        ("--resume", "tinker://run/weights/tictactoe-step000001", "checkpoints in memory"),
    ],
)
def test_fake_service_refuses_options_it_cannot_honour(flag: str, value: str, reason: str) -> None:
    example = _load_example()
    args = example.parse_args(["--fake-service", flag, value])
    with pytest.raises(
        SystemExit, match=f"--fake-service cannot be combined with {flag} '{value}': .*{reason}"
    ):
        example._check_args(args)


def test_train_tinker_rejects_a_group_size_that_does_not_divide_the_batch() -> None:
    example = _load_example()
    args = example.parse_args(["--group-size", "3", "--rollouts-per-update", "4"])
    with pytest.raises(SystemExit, match="--rollouts-per-update 4 is not a multiple of --group-size 3"):
        example._check_args(args)
