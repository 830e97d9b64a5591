"""Math grading runs in a killable child process: a hang costs its timeout, never the env."""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ludic_envs.qa import equivalence
from ludic_envs.qa.equivalence import (
    Grader,
    GradingWorker,
    MathVerdict,
    UngradedAnswerError,
    grade_math_answer,
)
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
        assert worker.grade("slow", "x", 0.5) == (None, True)  # the grading would sleep an hour
        assert not _alive(pid)  # killed and reaped
        assert threading.active_count() == threads  # no thread left behind
        # The replacement was launched at the kill, so it is warm before the next grading asks.
        assert worker.pid not in (None, pid)
        assert worker.grade("fast", "fast", 30.0) == (True, False)
    finally:
        worker.stop()


@pytest.fixture
def sleepy_worker(monkeypatch: pytest.MonkeyPatch, sleepy_grader: Grader) -> Iterator[GradingWorker]:
    """The process-wide grading worker replaced by one that runs the sleepy grader."""
    worker = GradingWorker(sleepy_grader)
    monkeypatch.setattr(equivalence, "_WORKER", worker)
    monkeypatch.setattr(equivalence, "math_verify_available", lambda: True)
    try:
        yield worker
    finally:
        worker.stop()


def test_an_ungraded_answer_fails_the_episode_instead_of_being_paid_as_wrong(
    sleepy_worker: GradingWorker,
) -> None:
    env = make_math_env(sample={"problem": "2+2?", "answer": "4"}, grading_timeout_s=0.5)
    env.reset()
    with pytest.raises(UngradedAnswerError, match=r"could not be graded.*rather than paid as incorrect"):
        env.step({env.agent_id: "\\boxed{2^{2^{2^{2^{2^{2}}}}}}"})
    # Equal normal forms are decided without the child.
    env.reset()
    outcome = env.step({env.agent_id: "\\boxed{4}"})[env.agent_id]
    assert outcome.info["correct"] is True and outcome.reward == 1.0


async def test_the_engine_drops_and_counts_an_ungraded_episode(sleepy_worker: GradingWorker) -> None:
    from ludic_core.engine import RolloutEngine
    from ludic_core.protocols.single_agent import SingleAgentProtocol
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.rollout_settings import RolloutSettings
    from ludic_core.testing import ScriptedAgent, ScriptedChatClient

    engine = RolloutEngine(
        env_factories={
            "math": lambda: make_math_env(sample={"problem": "2+2?", "answer": "4"}, grading_timeout_s=0.5)
        },
        protocol_factories={
            answer: (lambda a=answer: SingleAgentProtocol(ScriptedAgent(ScriptedChatClient([a]))))
            for answer in ("\\boxed{2^{2^{2^{2}}}}", "\\boxed{4}")
        },
    )
    requests = [
        RolloutRequest(EnvSpec("math"), ProtocolSpec(answer))
        for answer in ("\\boxed{2^{2^{2^{2}}}}", "\\boxed{4}")
    ]
    result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=1, on_failure="continue"))
    [ungraded, graded] = result.episodes
    assert ungraded.failure is not None and ungraded.failure.error_type == "UngradedAnswerError"
    assert graded.failure is None and graded.rollouts[0].total_reward == 1.0


def test_verdicts_without_a_child() -> None:
    assert grade_math_answer("\\frac12", "\\frac{1}{2}") == MathVerdict(True)
    assert grade_math_answer("1/3", "0.5", use_math_verify=False) == MathVerdict(False)
    assert not MathVerdict(False, timed_out=True) and not MathVerdict(False, timed_out=True).graded


@pytest.mark.skipif(not equivalence.math_verify_available(), reason="math-verify is not installed")
def test_real_math_verify_runs_in_the_child() -> None:
    assert grade_math_answer("\\frac{1}{2}", "0.5") == MathVerdict(True)
    assert grade_math_answer("\\frac{1}{3}", "0.5") == MathVerdict(False)
    assert equivalence._WORKER.pid is not None and equivalence._WORKER.pid != os.getpid()
