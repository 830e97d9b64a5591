"""Are two MATH final answers the same? ``math-verify`` when installed, else normalised strings.

math-verify (sympy underneath) can run for minutes on a hostile answer such as a power tower, inside
C code that no signal or thread can interrupt. It therefore runs in a child process that is killed
when it overruns its timeout. Grading has three outcomes: equivalent, not equivalent, and *ungraded*
(the check overran its timeout twice, or its process could not start): an ungraded verdict is never
a decision, and :class:`~ludic_envs.qa.env.DatasetQAEnv` fails the episode on it
(:class:`UngradedAnswerError`), so the answer is neither paid nor told it was wrong, and the engine
drops and counts it. A killed child is replaced at once, in the background, so the next grading does
not pay the process start (which has its own limit, ``WORKER_START_TIMEOUT_S``).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import threading
from collections.abc import Callable
from functools import lru_cache
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import attrs

from ludic_core.errors import ConfigError, LudicError
from ludic_core.logs import get_logger
from ludic_envs.qa.latex import normalize_math_answer

__all__ = [
    "MathVerdict",
    "UngradedAnswerError",
    "grade_math_answer",
    "math_answers_equivalent",
    "math_verify_available",
]

log = get_logger(__name__)

# Starting the child imports sympy and math-verify (seconds on a busy machine); that wait is not
# charged to the grading timeout.
WORKER_START_TIMEOUT_S = 120.0
# How long a caller waits for another thread's grading to finish before giving up on its own.
WORKER_BUSY_TIMEOUT_S = 300.0
# How long to wait for a killed child to be reaped.
WORKER_REAP_TIMEOUT_S = 10.0

# Attempts per grading: a second one absorbs a child that was slow to start or a loaded machine.
GRADING_ATTEMPTS = 2

Grader = Callable[[str, str, float], "bool | None"]


class UngradedAnswerError(LudicError):
    """An answer could not be graded (see the module docstring); the episode fails rather than pay it
    as incorrect."""


@attrs.frozen
class MathVerdict:
    """The outcome of one grading; truthy when the answers are equivalent.

    ``timed_out``: the symbolic check overran its timeout (or could not run): *ungraded*, with no
    decision (``equivalent`` is then False, and callers must not read it as one).
    """

    equivalent: bool
    timed_out: bool = False

    def __bool__(self) -> bool:
        return self.equivalent

    @property
    def graded(self) -> bool:
        return not self.timed_out


@lru_cache(maxsize=1)
def math_verify_available() -> bool:
    return importlib.util.find_spec("math_verify") is not None


def _as_latex(answer: str) -> str:
    # math-verify extracts from LaTeX environments; a bare answer is wrapped so "\frac12" parses.
    stripped = answer.strip()
    return stripped if "$" in stripped or "\\boxed" in stripped else f"${stripped}$"


def _math_verify_equal(predicted: str, target: str, timeout_s: float) -> bool | None:
    """math-verify's decision (None: it could not parse one side). Runs in the grading child."""
    from math_verify import parse, verify

    # math-verify's own timeout uses SIGALRM, which needs the main thread (the child's loop runs
    # there); it stops pure-Python work cleanly, and the kill covers the rest.
    timeout = max(1, int(timeout_s)) if threading.current_thread() is threading.main_thread() else None
    try:
        gold: Any = parse(_as_latex(target), parsing_timeout=timeout)
        pred: Any = parse(_as_latex(predicted), parsing_timeout=timeout)
        if not gold or not pred:
            return None
        return bool(verify(gold, pred, timeout_seconds=timeout))
    except Exception as exc:  # math-verify raises on exotic input; fall back to strings
        log.debug("math_verify_failed", error=repr(exc), predicted=predicted[:200], target=target[:200])
        return None


def _serve(conn: Connection, grader: Grader) -> None:
    """The child's loop: one ``(predicted, target, timeout_s)`` request in, one result out."""
    if grader is _math_verify_equal:
        import math_verify  # noqa: F401  (imported once here, so requests do not pay for it)
    conn.send("ready")
    while True:
        try:
            predicted, target, timeout_s = conn.recv()
        except EOFError:  # the parent closed the pipe or died
            return
        conn.send(grader(predicted, target, timeout_s))


class GradingWorker:
    """One long-lived grading child, restarted after it is killed for overrunning a timeout.

    Requests are served one at a time (math-verify is CPU-bound Python, so threads gained nothing
    before either). ``grader`` must be picklable (a module-level function); the child is started
    with ``spawn`` so it inherits no threads or locks of the parent.
    """

    def __init__(self, grader: Grader = _math_verify_equal) -> None:
        self._grader = grader
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _launch(self) -> None:
        """Start a child without waiting for it: it imports its libraries while the caller goes on."""
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_serve, args=(child, self._grader), name="ludic-math-grader", daemon=True
        )
        process.start()
        child.close()
        self._process, self._conn, self._ready = process, parent, False

    def _start(self) -> Connection:
        """The ready child's pipe: the one launched earlier, else a new one; waits for its greeting."""
        if self._conn is None:
            self._launch()
        parent = self._conn
        assert parent is not None
        if self._ready:
            return parent
        if not parent.poll(WORKER_START_TIMEOUT_S):
            self.stop()
            raise TimeoutError(f"the math grading process did not start within {WORKER_START_TIMEOUT_S}s")
        if parent.recv() != "ready":
            self.stop()
            raise RuntimeError("the math grading process sent an unexpected greeting")
        self._ready = True
        return parent

    def stop(self) -> None:
        """Kill the child (if any) and wait for it to be reaped."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._ready = False
        if conn is not None:
            conn.close()
        if process is not None:
            process.kill()
            process.join(WORKER_REAP_TIMEOUT_S)

    def grade(self, predicted: str, target: str, timeout_s: float) -> tuple[bool | None, bool]:
        """``(decision, timed_out)``; on a timeout the child is killed and the decision is None."""
        if not self._lock.acquire(timeout=WORKER_BUSY_TIMEOUT_S):
            log.warning("math_grading_busy", waited_s=WORKER_BUSY_TIMEOUT_S)
            return None, True
        try:
            try:
                conn = self._start()
                conn.send((predicted, target, timeout_s))
                if conn.poll(timeout_s):
                    result: bool | None = conn.recv()
                    return result, False
            except (OSError, EOFError, TimeoutError, RuntimeError) as exc:  # the child died or never started
                log.warning("math_grading_failed", error=repr(exc))
                self.stop()
                return None, True
            log.warning(
                "math_grading_timeout", timeout_s=timeout_s, predicted=predicted[:200], target=target[:200]
            )
            self.stop()
            self._launch()  # the replacement warms up while the caller goes on
            return None, True
        finally:
            self._lock.release()


_WORKER = GradingWorker()


def grade_math_answer(
    predicted: str, target: str, *, use_math_verify: bool = True, timeout_s: float = 5.0
) -> MathVerdict:
    """Grade ``predicted`` against ``target``, as :func:`math_answers_equivalent`; a symbolic check
    that overruns ``timeout_s`` (or whose process cannot start) is tried once more, then the verdict
    is ungraded (``timed_out=True``)."""
    if not timeout_s > 0:
        raise ConfigError(f"timeout_s must be positive, got {timeout_s!r}")
    # Equal normal forms need no symbolic check and no process.
    if normalize_math_answer(predicted) == normalize_math_answer(target):
        return MathVerdict(True)
    if not use_math_verify or not math_verify_available():
        return MathVerdict(False)
    for _attempt in range(GRADING_ATTEMPTS):
        decision, timed_out = _WORKER.grade(predicted, target, timeout_s)
        if not timed_out:
            return MathVerdict(decision is True)
    return MathVerdict(False, timed_out=True)


def math_answers_equivalent(
    predicted: str, target: str, *, use_math_verify: bool = True, timeout_s: float = 5.0
) -> bool:
    """True when ``predicted`` and ``target`` denote the same answer.

    Equal normal forms (:func:`normalize_math_answer`) always count as equal; otherwise, when
    ``math-verify`` is installed (the ``math``/``hf`` extra) and ``use_math_verify`` is set, its
    symbolic check decides (``1/2`` vs ``0.5``, ``\\frac{\\sqrt3}{2}`` vs ``\\frac{\\sqrt{3}}{2}``), in
    a child process killed after ``timeout_s`` seconds; an answer it cannot grade raises
    :class:`UngradedAnswerError` rather than pass for a decision.
    """
    verdict = grade_math_answer(predicted, target, use_math_verify=use_math_verify, timeout_s=timeout_s)
    if not verdict.graded:
        raise UngradedAnswerError(
            f"could not grade {predicted[:80]!r} against {target[:80]!r}: the symbolic check overran "
            f"timeout_s={timeout_s} {GRADING_ATTEMPTS} times or its process did not start"
        )
    return verdict.equivalent
