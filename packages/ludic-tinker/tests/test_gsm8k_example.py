"""``ludic train gsm8k-grpo backend.kind=tinker`` on the GSM8K rows beside the project: the smoke config
(``examples/gsm8k/grpo_tinker_smoke.toml``, the recipe's own fake service) and the full-size config
(``examples/gsm8k/grpo_tinker.toml``, cut to two small steps) against the loopback fake service this
test process serves, so the test can see what reached it. Subprocesses with the real SDK."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ludic_command import EXAMPLES, SMALL, ludic

from ludic_tinker.testing import FAKE_BASE_MODEL, FakeTinkerService

pytest.importorskip("ludic_envs")
pytest.importorskip("datasets")

DATA = Path(os.environ.get("LUDIC_DATA_DIR", "")) / "gsm8k"
pytestmark = [
    pytest.mark.skipif(
        not (DATA / "train.jsonl").is_file(),
        reason="no GSM8K data: set LUDIC_DATA_DIR to a folder holding gsm8k/train.jsonl and gsm8k/test.jsonl",
    ),
    pytest.mark.slow,  # ~10-17 s each: a subprocess that loads the dataset and trains two steps
]
# The smoke config's data_files are relative to the repository root; the tests run elsewhere.
ROWS = tuple(
    f'{table}.data_files.{split}="{DATA / f"{split}.jsonl"}"'
    for table in ("env_kwargs", "eval_env_kwargs")
    for split in ("train", "test")
)


def _metrics(run_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_smoke_config_trains_against_the_recipes_fake_service(
    fake_service: FakeTinkerService, tmp_path: Path
) -> None:
    smoke = EXAMPLES / "gsm8k" / "grpo_tinker_smoke.toml"
    done = ludic("train", "gsm8k-grpo", str(smoke), *ROWS, "run_dir=run", service=fake_service, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert fake_service.forward_backward_calls == [], "tinker.fake_service starts a fake of its own"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["env"], config["algorithm"], config["backend"]["kind"]) == ("gsm8k", "grpo", "tinker")
    evaluation = _metrics(tmp_path / "run")[-1]
    assert evaluation["eval/num_rollouts"] == 2
    assert 0.0 <= evaluation["eval/accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("algorithm", "loss_fn", "band"),
    [("grpo", "ppo", (0.8, 1.27)), ("gspo", "gspo", (1 - 3e-4, 1 + 4e-4))],
)
def test_full_size_config_trains_on_the_service(
    fake_service: FakeTinkerService, tmp_path: Path, algorithm: str, loss_fn: str, band: tuple[float, float]
) -> None:
    from ludic_tinker._sdk import supported_loss_fns

    config = EXAMPLES / "gsm8k" / "grpo_tinker.toml"
    done = ludic(
        "train", "gsm8k-grpo", str(config), *SMALL, *ROWS, f"algorithm={algorithm}", "sampling.max_tokens=8",
        f"tinker.base_model={FAKE_BASE_MODEL}", "lora.rank=4", "run_dir=run",
        service=fake_service, cwd=tmp_path,
    )  # fmt: skip
    if loss_fn not in supported_loss_fns():  # gspo before SDK 0.34: refused before any remote call
        assert done.returncode == 2 and "has no 'gspo' loss" in done.stderr, done.stderr
        assert fake_service.forward_backward_calls == []
        return
    assert done.returncode == 0, done.stderr
    fake_service.raise_for_violations()
    calls = fake_service.forward_backward_calls
    assert [call.loss_fn for call in calls] == [loss_fn, loss_fn]
    assert calls[0].loss_fn_config == pytest.approx(
        {"clip_low_threshold": band[0], "clip_high_threshold": band[1]}
    )
    assert [len(call.model_inputs) for call in calls] == [4, 4], "2 questions x 2 answers per step"
    assert [params["learning_rate"] for params in fake_service.optim_step_params] == pytest.approx([4e-5] * 2)
    evaluation = _metrics(tmp_path / "run")[-1]
    assert evaluation["eval/num_rollouts"] == 2
    assert 0.0 <= evaluation["eval/accuracy"] <= 1.0
