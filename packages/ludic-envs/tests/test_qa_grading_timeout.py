"""Math grading runs in a killable child process: a hang costs its timeout, never the env."""

from __future__ import annotations

import importlib
import os
import threading
import time
from pathlib import Path

import pytest

from ludic_envs.qa import equivalence
from ludic_envs.qa.equivalence import Grader, GradingWorker, MathVerdict, grade_math_answer
from ludic_envs.qa.math_qa import make_math_env

# The grader must be importable by name in the spawned child, and tests are imported with
# --import-mode=importlib (not by name), so it lives in a module written to a folder on sys.path.
SLEEPY_GRADER = """
import time


def sleepy_grader(predicted, target, timeout_s):
    # Stands in for math-verify on a power tower: never returns in time unless told "fast".
    if predicted != "fast":
        time.sleep(3600)
    return predicted == target or None
"""


@pytest.fixture
def sleepy_grader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Grader:
    (tmp_path / "ludic_test_sleepy_grader.py").write_text(SLEEPY_GRADER)
    monkeypatch.syspath_prepend(str(tmp_path))  # the child is spawned with the parent's sys.path
    module = importlib.import_module("ludic_test_sleepy_grader")
    grader: Grader = module.sleepy_grader
    return grader


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_hanging_grading_is_killed_and_the_next_one_works(sleepy_grader: Grader) -> None:
    worker = GradingWorker(sleepy_grader)
    try:
        assert worker.grade("fast", "fast", 30.0) == (True, False)  # starts the child
        pid = worker.pid
        assert pid is not None
        threads = threading.active_count()
        start = time.monotonic()
        assert worker.grade("slow", "x", 0.5) == (None, True)
        assert time.monotonic() - start < 0.5 + 10.0  # the grading would sleep an hour
        assert worker.pid is None and not _alive(pid)  # killed and reaped
        assert threading.active_count() == threads  # no thread left behind
        assert worker.grade("fast", "fast", 30.0) == (True, False)  # a fresh child
        assert worker.pid not in (None, pid)
    finally:
        worker.stop()


def test_math_env_reports_a_grading_timeout(monkeypatch: pytest.MonkeyPatch, sleepy_grader: Grader) -> None:
    worker = GradingWorker(sleepy_grader)
    monkeypatch.setattr(equivalence, "_WORKER", worker)
    monkeypatch.setattr(equivalence, "math_verify_available", lambda: True)
    try:
        env = make_math_env(sample={"problem": "2+2?", "answer": "4"}, grading_timeout_s=0.5)
        env.reset()
        start = time.monotonic()
        outcome = env.step({env.agent_id: "\\boxed{2^{2^{2^{2^{2^{2}}}}}}"})[env.agent_id]
        assert time.monotonic() - start < 0.5 + 30.0  # the child's first start is not charged
        assert outcome.reward == 0.0
        assert outcome.info["correct"] is False and outcome.info["grading_timeout"] is True
        # Equal normal forms are decided without the child.
        env.reset()
        outcome = env.step({env.agent_id: "\\boxed{4}"})[env.agent_id]
        assert outcome.info["correct"] is True and "grading_timeout" not in outcome.info
    finally:
        worker.stop()


def test_verdicts_without_a_child() -> None:
    assert grade_math_answer("\\frac12", "\\frac{1}{2}") == MathVerdict(True)
    assert grade_math_answer("1/3", "0.5", use_math_verify=False) == MathVerdict(False)
    assert not MathVerdict(False, timed_out=True)


@pytest.mark.skipif(not equivalence.math_verify_available(), reason="math-verify is not installed")
def test_real_math_verify_runs_in_the_child() -> None:
    assert grade_math_answer("\\frac{1}{2}", "0.5") == MathVerdict(True)
    assert grade_math_answer("\\frac{1}{3}", "0.5") == MathVerdict(False)
    assert equivalence._WORKER.pid is not None and equivalence._WORKER.pid != os.getpid()
