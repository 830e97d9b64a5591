"""Kill a training process with SIGKILL at an arbitrary moment, resume, and check the next step is
exactly the step an uninterrupted run takes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("resume_worker.py")
NUM_STEPS = 8


def _run(ckpt: Path, log: Path, *, resume: bool = False) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(WORKER), str(ckpt), str(log), str(NUM_STEPS)] + (
        ["--resume"] if resume else []
    )
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _records(log: Path) -> list[dict[str, float]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _finish(proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    _out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()[-3000:]


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    kill_after_records = 3
    # The uninterrupted reference runs beside the run that gets killed (process start-up dominates).
    reference_log = tmp_path / "reference.jsonl"
    reference_proc = _run(tmp_path / "ckpt_ref", reference_log)
    log = tmp_path / "interrupted.jsonl"
    ckpt = tmp_path / "ckpt"
    proc = _run(ckpt, log)
    deadline = time.monotonic() + 240
    while len(_records(log)) < kill_after_records:
        assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline, "worker made no progress"
        time.sleep(0.005)
    # Kill without warning: possibly in the middle of writing the next checkpoint.
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = max(r["step"] for r in _records(log))

    _finish(reference_proc)
    reference = {r["step"]: r for r in _records(reference_log)}
    assert sorted(reference) == list(range(1, NUM_STEPS + 1))

    resumed_log = tmp_path / "resumed.jsonl"
    _finish(_run(ckpt, resumed_log, resume=True))
    resumed = _records(resumed_log)
    assert resumed, "the resumed run took no step"
    first = resumed[0]
    # The newest complete checkpoint is the last logged step or the one after it (killed just after
    # the rename, before the log line).
    assert killed_at + 1 <= first["step"] <= killed_at + 2
    for record in resumed:
        expected = reference[record["step"]]
        for key in ("loss", "grad_norm", "reward", "param_sum"):
            assert record[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-7), (record["step"], key)
    assert resumed[-1]["step"] == NUM_STEPS
    assert not list(ckpt.glob(".tmp-step_*")), "a stale temporary checkpoint survived the resume"
