"""Close-match hints for a mistyped name (an env, a recipe, an algorithm): the registered names nearest
to it by :func:`difflib.get_close_matches`, so an error can say what was probably meant."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_names", "did_you_mean"]


def close_names(name: str, known: Iterable[str], *, limit: int = 3) -> list[str]:
    """Up to ``limit`` of ``known`` closest to ``name``, best first (difflib's ratio >= 0.6)."""
    return difflib.get_close_matches(name, list(known), n=limit)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'tictactoe'? "`` (or two or three names), or ``""`` when none is close."""
    close = close_names(name, known)
    if not close:
        return ""
    return f"did you mean {' or '.join(repr(c) for c in close)}? "
