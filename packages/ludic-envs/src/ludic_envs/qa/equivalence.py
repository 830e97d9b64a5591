"""Are two MATH final answers the same? ``math-verify`` when installed, else normalised strings."""

from __future__ import annotations

import importlib.util
import threading
from functools import lru_cache
from typing import Any

from ludic_core.logs import get_logger
from ludic_envs.qa.latex import normalize_math_answer

__all__ = ["math_answers_equivalent", "math_verify_available"]

log = get_logger(__name__)


@lru_cache(maxsize=1)
def math_verify_available() -> bool:
    return importlib.util.find_spec("math_verify") is not None


def _as_latex(answer: str) -> str:
    # math-verify extracts from LaTeX environments; a bare answer is wrapped so "\frac12" parses.
    stripped = answer.strip()
    return stripped if "$" in stripped or "\\boxed" in stripped else f"${stripped}$"


def _math_verify_equal(predicted: str, target: str, timeout_s: int) -> bool | None:
    from math_verify import parse, verify

    # math-verify enforces its timeout with SIGALRM, which only the main thread may use; elsewhere
    # (rollout workers) it runs without one.
    timeout = timeout_s if threading.current_thread() is threading.main_thread() else None
    try:
        gold: Any = parse(_as_latex(target), parsing_timeout=timeout)
        pred: Any = parse(_as_latex(predicted), parsing_timeout=timeout)
        if not gold or not pred:
            return None
        return bool(verify(gold, pred, timeout_seconds=timeout))
    except Exception as exc:  # math-verify raises on exotic input; fall back to strings
        log.debug("math_verify_failed", error=repr(exc), predicted=predicted[:200], target=target[:200])
        return None


def math_answers_equivalent(
    predicted: str, target: str, *, use_math_verify: bool = True, timeout_s: int = 5
) -> bool:
    """True when ``predicted`` and ``target`` denote the same answer.

    Equal normal forms (:func:`normalize_math_answer`) always count as equal; otherwise, when
    ``math-verify`` is installed (the ``math``/``hf`` extra) and ``use_math_verify`` is set, its
    symbolic check decides (``1/2`` vs ``0.5``, ``\\frac{\\sqrt3}{2}`` vs ``\\frac{\\sqrt{3}}{2}``).
    """
    if normalize_math_answer(predicted) == normalize_math_answer(target):
        return True
    if not use_math_verify or not math_verify_available():
        return False
    return _math_verify_equal(predicted, target, timeout_s) is True
