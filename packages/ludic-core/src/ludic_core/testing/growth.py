"""A check that work grows linearly with its input, with no wall-clock bound a loaded machine breaks.

:func:`assert_linear_time` compares the process CPU time of one call on ``n`` and on ``8n`` characters
(best of three, so another process on the machine neither adds to it nor, through preemption,
inflates a sample): linear work grows about 8x, quadratic 64x, and the bound sits between them. A call
that stays under ``negligible_s`` of CPU on the large input passes whatever its ratio: timer noise
dominates there, and quadratic work on a megabyte takes minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["assert_linear_time"]

GROWTH = 8
MAX_RATIO = 24.0  # linear ~8x, quadratic ~64x
REPEATS = 3


def _cpu_seconds(call: Callable[[str], object], text: str) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.process_time()
        call(text)
        best = min(best, time.process_time() - start)
    return best


def assert_linear_time(
    call: Callable[[str], object],
    make_input: Callable[[int], str],
    *,
    size: int = 1_000_000,
    negligible_s: float = 0.02,
) -> None:
    """Raise ``AssertionError`` when ``call(make_input(size))`` takes more than :data:`MAX_RATIO` times
    the CPU time of ``call(make_input(size // 8))``."""
    small = _cpu_seconds(call, make_input(size // GROWTH))
    large = _cpu_seconds(call, make_input(size))
    if large < negligible_s:
        return
    ratio = large / max(small, 1e-9)
    name = getattr(call, "__qualname__", None) or repr(call)
    assert ratio < MAX_RATIO, (
        f"{name}: {GROWTH}x the input took {ratio:.1f}x the CPU time ({small:.4f} s -> {large:.4f} s); "
        f"linear work grows about {GROWTH}x"
    )
