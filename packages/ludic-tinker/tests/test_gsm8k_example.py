"""Smoke run of ``examples/gsm8k/train.py --backend tinker`` against the loopback fake Tinker service.

``train.py``'s command line routes ``--backend tinker`` to ``train_tinker.py``, whose ``main`` runs
unmodified (real tinker SDK, real ``TinkerTrainer``, real GSM8K rows, env and ``\\boxed{}`` agent);
only the tokenizer is the fake service's byte tokenizer, with a plain-text chat template, because the
fake model's vocabulary is bytes (and a real base model's tokenizer would come from the Hub).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ludic_core.errors import ConfigError
from ludic_tinker.testing import (
    FAKE_API_KEY,
    FAKE_BASE_MODEL,
    ByteChatTemplate,
    FakeTinkerService,
    FakeTokenizer,
)

pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")
pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_DIR = ROOT / "examples" / "gsm8k"
DATA = Path(os.environ.get("LUDIC_DATA_DIR", "")) / "gsm8k"

pytestmark = pytest.mark.skipif(
    not (DATA / "train.jsonl").is_file(),
    reason="no GSM8K data: set LUDIC_DATA_DIR to a folder holding gsm8k/train.jsonl and gsm8k/test.jsonl "
    "(the openai/gsm8k hub dataset saved with datasets' to_json); CI sets it",
)


def _load_train() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gsm8k_train_for_tinker", EXAMPLE_DIR / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argv(service: FakeTinkerService, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--backend",
        "tinker",
        "--base-model",
        FAKE_BASE_MODEL,
        "--base-url",
        service.base_url,
        "--data-dir",
        str(DATA),
        "--limit",
        "4",
        "--eval-limit",
        "3",
        "--eval-group-size",
        "2",
        "--eval-temperature",
        "1.0",
        "--train-steps",
        "2",
        "--group-size",
        "2",
        "--rollouts-per-update",
        "4",
        "--max-completion-tokens",
        "8",
        "--lora-rank",
        "4",
        "--eval-before-start",
        "--eval-every",
        "2",
        "--timeout-s",
        "60",
        "--metrics",
        str(tmp_path / "metrics.jsonl"),
        *extra,
    ]


async def _run(train: ModuleType, argv: list[str], tokenizer: FakeTokenizer) -> tuple[Any, list[Any]]:
    run, args = train.cli(argv)
    assert args.backend == "tinker" and args.base_model == FAKE_BASE_MODEL, "routed to train_tinker.py"
    results = await run(
        args, api_key=FAKE_API_KEY, tokenizer=tokenizer, chat_template=ByteChatTemplate(tokenizer)
    )
    return args, results


def _check_eval_lines(metrics: Path) -> None:
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2, 2], "eval before start, two steps, eval after"
    for evaluation in (lines[0], lines[-1]):
        # train.py's eval metrics: 3 test questions × 2 answers, every one accounted for.
        assert evaluation["eval/num_rollouts"] == 6
        assert 0.0 <= evaluation["eval/accuracy"] <= evaluation["eval/pass@2"] <= 1.0
        assert evaluation["eval/pass@1"] == pytest.approx(evaluation["eval/accuracy"])
        assert 0.0 <= evaluation["eval/parse_error_rate"] <= 1.0
        assert 0 < evaluation["eval/completion_length_mean"] <= 8


async def test_train_backend_tinker_runs_two_grpo_steps_on_gsm8k(
    fake_service: FakeTinkerService, tokenizer: FakeTokenizer, tmp_path: Path
) -> None:
    train = _load_train()
    args, results = await _run(train, _argv(fake_service, tmp_path), tokenizer)

    assert [r["step"] for r in results] == [1.0, 2.0]
    # GRPO is Tinker's ppo loss at make_grpo's clip band; one forward_backward and optim_step a step.
    calls = fake_service.forward_backward_calls
    assert [call.loss_fn for call in calls] == ["ppo", "ppo"]
    assert calls[0].loss_fn_config == pytest.approx({"clip_low_threshold": 0.8, "clip_high_threshold": 1.27})
    assert len(fake_service.optim_step_params) == 2
    assert fake_service.optim_step_params[0]["learning_rate"] == pytest.approx(args.lr)
    # 4 answers a step, each prompt a real GSM8K training question.
    assert [len(call.model_inputs) for call in calls] == [4, 4]
    questions = [row["question"] for row in train.load_split(args, "train", 4)]
    for tokens in calls[0].model_inputs:
        text = tokenizer.decode(tokens)
        assert any(question in text for question in questions), text[:200]
    _check_eval_lines(args.metrics)


async def test_gspo_uses_tinkers_gspo_loss_or_says_the_sdk_lacks_it(
    fake_service: FakeTinkerService, tokenizer: FakeTokenizer, tmp_path: Path
) -> None:
    from ludic_tinker._sdk import supported_loss_fns

    train = _load_train()
    argv = _argv(fake_service, tmp_path, "--algorithm", "gspo")
    if "gspo" not in supported_loss_fns():
        with pytest.raises(ConfigError, match="has no 'gspo' loss"):
            await _run(train, argv, tokenizer)
        assert fake_service.forward_backward_calls == [], "fails before any remote call"
        return
    _, results = await _run(train, argv, tokenizer)
    assert [r["step"] for r in results] == [1.0, 2.0]
    calls = fake_service.forward_backward_calls
    assert [call.loss_fn for call in calls] == ["gspo", "gspo"]
    assert calls[0].loss_fn_config == pytest.approx(
        {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4}
    )
    _check_eval_lines(tmp_path / "metrics.jsonl")


async def test_fake_service_flag_dry_runs_the_recipe_offline(tmp_path: Path) -> None:
    train = _load_train()
    argv = [
        "--backend",
        "tinker",
        "--fake-service",
        "--data-dir",
        str(DATA),
        "--limit",
        "2",
        "--eval-limit",
        "2",
        "--train-steps",
        "1",
        "--group-size",
        "2",
        "--rollouts-per-update",
        "2",
        "--max-completion-tokens",
        "8",
        "--eval-every",
        "1",
        "--timeout-s",
        "60",
        "--metrics",
        str(tmp_path / "metrics.jsonl"),
    ]
    run, args = train.cli(argv)
    results = await run(args)  # no api key, tokenizer or chat template: --fake-service brings its own
    assert [r["step"] for r in results] == [1.0]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 1]
    assert lines[-1]["eval/num_rollouts"] == 2


def test_train_tinker_rejects_bad_group_sizes(tmp_path: Path) -> None:
    train = _load_train()
    run, args = train.cli(["--backend", "tinker", "--group-size", "3", "--rollouts-per-update", "4"])
    example = sys.modules[run.__module__]  # train_tinker.py, as cli() loaded it
    with pytest.raises(SystemExit, match="--rollouts-per-update 4 is not a multiple of --group-size 3"):
        example.check_args(args)
    _, args = train.cli(["--backend", "tinker", "--group-size", "1", "--rollouts-per-update", "4"])
    with pytest.raises(SystemExit, match="--group-size must be >= 2"):
        example.check_args(args)
