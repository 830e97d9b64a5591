"""``tools/run_side_by_side.py``, which runs CI's learning checks at once: every command runs to its end,
each one's output is printed whole under its name, and the exit status is a failed command's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "run_side_by_side.py"


def _run(*specs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "--heartbeat", "0.5", *specs], capture_output=True, text=True, timeout=60
    )


def test_every_command_runs_and_the_failed_one_sets_the_status() -> None:
    python = sys.executable
    done = _run(
        f"slow={python} -c 'import time; time.sleep(2); print(\"slow done\")'",
        f"broken={python} -c 'import sys; print(\"broken ran\"); sys.exit(3)'",
    )
    assert done.returncode == 3, done.stdout
    out = done.stdout
    # Both ran to the end, each one's output under its own header, the failure named last.
    assert "===== [slow] exit 0" in out and "slow done" in out
    assert "===== [broken] exit 3" in out and "broken ran" in out
    assert "still running after" in out and out.rstrip().endswith("failed: broken (exit 3)")


def test_all_passing_exits_zero() -> None:
    done = _run(f"a={sys.executable} -c pass", f"b={sys.executable} -c pass")
    assert done.returncode == 0 and "all 2 passed" in done.stdout


def test_a_spec_without_a_name_is_refused() -> None:
    done = _run("python -c pass")
    assert done.returncode != 0 and "expected NAME=COMMAND" in done.stderr
