"""CPU smoke runs of the Tic-Tac-Toe examples with a tiny random model."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("peft")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tic_tac_toe"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"ttt_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_smoke_with_checkpoint_resume_and_export(tmp_path: Path) -> None:
    train = _load("train")
    argv = [
        "--model",
        "tiny",
        "--train-steps",
        "2",
        "--group-size",
        "2",
        "--rollouts-per-update",
        "4",
        "--max-steps-per-episode",
        "2",
        "--max-completion-tokens",
        "6",
        "--eval-every",
        "2",
        "--eval-episodes",
        "2",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--checkpoint-every",
        "1",
        "--logger",
        "jsonl",
        "--metrics",
        str(tmp_path / "metrics.jsonl"),
        "--final-save",
        str(tmp_path / "final"),
        "--micro-token-budget",
        "4096",
    ]
    results = asyncio.run(train.main(train.parse_args(argv)))
    assert [r["train/step"] for r in results] == [1.0, 2.0]
    assert (tmp_path / "ckpt" / "step_000002" / "state.pt").is_file()
    assert (tmp_path / "final" / "config.json").is_file()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert any('"eval/win_rate"' in line for line in lines)
    # --resume continues from the newest checkpoint: nothing left to do for 2 steps, one more for 3.
    resumed = asyncio.run(train.main(train.parse_args([*argv, "--resume", "--train-steps", "3"])))
    assert [r["train/step"] for r in resumed] == [3.0]


def test_rejection_sampling_then_sft_smoke(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES.parent))
    spec = importlib.util.spec_from_file_location(
        "rejection_sampling", EXAMPLES.parent / "rejection_sampling.py"
    )
    assert spec is not None and spec.loader is not None
    sampling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sampling)
    data = tmp_path / "kept.jsonl"
    # A random tiny model never wins: keep every game (min reward below any outcome) to exercise the path.
    summary = asyncio.run(
        sampling.main(
            sampling.parse_args(
                [
                    "--model",
                    "tiny",
                    "--episodes",
                    "4",
                    "--max-steps",
                    "2",
                    "--max-tokens",
                    "6",
                    "--min-reward",
                    "-100",
                    "--output",
                    str(data),
                ]
            )
        )
    )
    assert summary["kept"] == 4 and len(data.read_text().splitlines()) == 4

    # The SFT side is the `tictactoe-sft` recipe, run as a user runs it.
    smoke = EXAMPLES / "sft_smoke.toml"
    done = _ludic(
        "train",
        "tictactoe-sft",
        str(smoke),
        f"data=['{data}']",
        "trainer.lr=1e-3",
        "run_dir=sft",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    metrics = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [m.get("stats", m)["train/loss"] for m in metrics if "train/loss" in m.get("stats", m)]
    assert len(losses) >= 2 and all(loss > 0 for loss in losses)
    # Filtering again at load time with a bar nobody reaches leaves no data: a clear error, no traceback.
    refused = _ludic(
        "train", "tictactoe-sft", str(smoke), f"data=['{data}']", "min_reward=5", "run_dir=c2", cwd=tmp_path
    )
    assert refused.returncode == 2 and "no SFT items" in refused.stderr
    assert "Traceback" not in refused.stderr


def _ludic(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "ludic"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ludic_core.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
