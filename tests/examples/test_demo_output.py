"""What examples/demo.py prints: a ``[progress]`` line for every phase when the output is not a terminal
(a real subprocess with a tiny random model, every stage at a few episodes), and rich tables and panels
that fit an 80-column terminal. Whether the demo learns is checked on SmolLM2 by ``nox -s demo``."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("peft")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")
pytest.importorskip("rich")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo.py"
PROGRESS = re.compile(r"^\[progress\] (\d+) s \| (.+)$")


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ludic_demo_output", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_terminal_every_phase_prints_a_progress_line_with_its_step_and_elapsed_time(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "COLUMNS": "80",
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("FORCE_COLOR", None)
    env.pop("FORCE_TERMINAL", None)
    args = [
        "--model", "tiny", "--teacher-games", "4", "--sft-steps", "2", "--grpo-steps", "2",
        "--groups-per-step", "1", "--group-size", "2", "--eval-positions", "4", "--eval-games", "2",
        "--threads", "1", "--progress-every", "30", "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    # stdout is a pipe, as in CI: rich draws no live panel there.
    done = subprocess.run(
        [sys.executable, str(DEMO), *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    progress = [m.groups() for line in done.stdout.splitlines() if (m := PROGRESS.match(line))]
    phases = [phase for _, phase in progress]
    for expected in (
        "loading the model",
        "evaluation: random legal",
        "evaluation: perfect",
        "evaluation: base model",
        "teacher games",
        "warm start | step 1/2",
        "warm start | step 2/2",
        "evaluation: warm start",
        "GRPO | step 1/2",
        "GRPO | step 2/2",
        "evaluation: GRPO",
        "plot",
    ):
        assert expected in phases, (expected, phases)
    # In the order the run goes through them, with a never-decreasing elapsed time.
    firsts = [phases.index(p) for p in ("loading the model", "teacher games", "GRPO | step 1/2", "plot")]
    assert firsts == sorted(firsts)
    elapsed = [int(seconds) for seconds, _ in progress]
    assert elapsed == sorted(elapsed)
    # Each final panel ends its line: nothing printed after it is glued to its bottom border.
    assert not [line for line in done.stdout.splitlines() if "╯" in line and not line.endswith("╯")]
    assert (tmp_path / "run" / "summary.json").is_file()


def _evals() -> dict[str, dict[str, Any]]:
    demo = _demo()
    games = dict.fromkeys((*demo.SHOWN, "win_rate_as_X", "win_rate_as_O"), 0.123)
    positions = {"legal_move_rate": 1.0, "optimal_move_rate": 0.5, "parse_error_rate": 0.0}
    evals: dict[str, dict[str, Any]] = {
        label: {"positions": positions, "sampled_games": games}
        for label in ("warm start", "GRPO", "random legal", "perfect")
    }
    evals["base model"] = {"positions": positions}
    return evals


def _fits(text: str, width: int) -> None:
    lines = text.splitlines()
    assert lines
    for line in lines:
        assert len(line) <= width, line
        assert "…" not in line, line  # rich's mark of a cell cut short


def test_the_results_table_and_the_live_panels_fit_80_columns() -> None:
    from rich.console import Console

    from ludic_core.loggers.console import RichConsoleLogger

    demo = _demo()
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    demo._table(console, _evals(), {"sampled_game_points": {"mean": 0.1, "low": 0.01, "high": 0.2, "n": 150}})
    table = out.getvalue()
    _fits(table, 80)
    assert "points_mean" in table and "random" in table and "perfect" in table

    for keys, stats in (
        (
            demo.GRPO_KEYS,
            {
                "train/avg_total_reward": -0.5,
                "train/loss": 0.1234,
                "train/grad_norm": 1.25,
                "train/clip_frac": 0.0,
                "perf/step_s": 30.1,
                "perf/batch_wait_s": 20.0,
                "perf/train_s": 10.0,
                "perf/tokens_per_s": 12345.6,
                "eval/points_mean": 0.5,
                "eval/optimal_move_rate": 0.61,
            },
        ),
        (demo.SFT_KEYS, {"train/loss": 51.0, "train/grad_norm": 12.7, "perf/tokens_per_s": 17968.6}),
    ):
        out = io.StringIO()
        logger = RichConsoleLogger(
            total_steps=5, keys=keys, console=Console(file=out, width=80, force_terminal=False), title="GRPO"
        )
        logger.log(1, stats)
        logger.close()
        panel = out.getvalue()
        _fits(panel, 80)
        for key in stats:
            assert key.split("/", 1)[1] in panel, key


def test_progress_lines_repeat_the_current_phase_until_it_changes_and_stay_silent_on_a_terminal() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    from progress_lines import ProgressLines

    out = io.StringIO()
    lines = ProgressLines(every_s=0.01, enabled=True, stream=out)
    try:
        lines.phase("GRPO", step=2, total=5)
        lines.detail("sampled games 40/150")
        deadline = time.monotonic() + 30  # a bound on the wait, not a measurement
        while out.getvalue().count("sampled games 40/150") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        lines.close()
    printed = out.getvalue().splitlines()
    assert printed[0].endswith("| GRPO | step 2/5")
    repeats = [line for line in printed if line.endswith("| GRPO | step 2/5 | sampled games 40/150")]
    assert len(repeats) >= 2 and all(PROGRESS.match(line) for line in printed)

    silent = io.StringIO()
    quiet = ProgressLines(every_s=0.01, enabled=False, stream=silent)
    quiet.phase("GRPO", step=1, total=5)
    quiet.close()
    assert silent.getvalue() == ""
    with pytest.raises(ValueError, match="every_s"):
        ProgressLines(every_s=0, enabled=True)
