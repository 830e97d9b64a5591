"""``examples/tic_tac_toe/grpo_tinker.toml`` (``ludic train tictactoe-grpo backend.kind=tinker``) against the loopback
fake Tinker service this test process serves: the example's full-size settings, cut to two small steps
by overrides, reach the service as written. The command runs as a subprocess with the real SDK; the
service's URL and key reach it as the SDK takes them (``TINKER_BASE_URL``, ``TINKER_API_KEY``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ludic_command import EXAMPLES, SMALL, ludic

from ludic_tinker.testing import FAKE_BASE_MODEL, FakeTinkerService

pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")
pytest.importorskip("ludic_train")  # `ludic train`


def test_full_size_config_trains_on_the_service(fake_service: FakeTinkerService, tmp_path: Path) -> None:
    config = EXAMPLES / "tic_tac_toe" / "grpo_tinker.toml"
    done = ludic(
        "train", "tictactoe-grpo", str(config), *SMALL, f"tinker.base_model={FAKE_BASE_MODEL}",
        "lora.rank=4", "run_dir=run", service=fake_service, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fake_service.raise_for_violations()
    # Each step reached the service: one forward_backward (grpo as the ppo loss) and one optim_step.
    assert [call.loss_fn for call in fake_service.forward_backward_calls] == ["ppo", "ppo"]
    assert [params["learning_rate"] for params in fake_service.optim_step_params] == pytest.approx([4e-5] * 2)
    # Samplers for step 0 (first batch), 1 (second batch) and 2 (the evaluation after the last step).
    assert len(fake_service.sampler_ids) == 3
    assert [run.lora_rank for run in fake_service.training_runs] == [4]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluation = lines[-1]
    assert "eval/reward_mean" in evaluation
    assert sum(evaluation[f"eval/{name}_rate"] for name in ("win", "draw", "loss", "illegal")) <= 1.0
