"""examples/solver_sft.py with a tiny random model: the solver's moves, SFT on them and the evaluations
in seconds (nothing is learned at this size; docs/training-results.md has SmolLM2's curve)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "solver_sft.py"


def test_the_tiny_run_trains_on_the_solvers_moves_and_scores_each_evaluation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--model", "tiny", "--steps", "2", "--positions-per-step", "4", "--eval-every", "1"]
    args += ["--eval-positions", "4", "--eval-games", "2", "--threads", "1", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "8 solver moves, 4 a step" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert [row["step"] for row in summary["curve"]] == [0, 1, 2]
    assert [row["solver_moves_seen"] for row in summary["curve"]] == [0, 4, 8]
    for row in summary["curve"]:
        assert 0.0 <= row["optimal_move_rate"] <= row["legal_move_rate"] <= 1.0
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "train/loss" in s] == [1, 2]
