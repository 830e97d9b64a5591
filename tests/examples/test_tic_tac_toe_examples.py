"""CPU smoke runs of the Tic-Tac-Toe examples with a tiny random model (GRPO training is the
``ludic train tictactoe-grpo`` recipe, run on its smoke config by tests/cli)."""

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


def test_training_positions_give_groups_of_one_undecided_position_each() -> None:
    common = _load("common")
    from ludic_envs.tictactoe import Board

    requests = common.grpo_requests(
        group_size=4, groups_per_step=16, temperature=1.0, seed=0, games=common.TrainingPositions()
    )(step=3)
    assert len(requests) == 64
    assert {r.env.kind for r in requests} == {"tictactoe_move"}
    starts = [r.env.kwargs["start_board"] for r in requests]
    groups = [starts[i : i + 4] for i in range(0, 64, 4)]
    assert all(len(set(group)) == 1 for group in groups)  # a group shares its position
    boards = [Board.from_string(group[0]) for group in groups]
    assert not any(board.over for board in boards)
    assert {board.to_move for board in boards} == {"X", "O"}
    assert (
        common.grpo_requests(
            group_size=4, groups_per_step=16, temperature=1.0, seed=0, games=common.TrainingPositions()
        )(step=3)
        == requests
    )  # a pure function of the step
