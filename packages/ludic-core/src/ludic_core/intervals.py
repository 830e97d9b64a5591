"""95% intervals for comparing evaluations: a mean, and the paired difference of two checkpoints.

Both are normal-approximation intervals (mean ± 1.96 standard errors), meant for the sample sizes an
evaluation uses (tens to hundreds of episodes). Pair items (the same question, position or game seed
scored before and after training) whenever you can: the paired interval removes the spread between
items, which usually dominates.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ludic_core.errors import ConfigError

__all__ = ["mean_interval", "paired_interval"]

_Z95 = 1.96


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """``(low, high)``: the 95% interval of the mean of ``values`` (standard error from the population
    standard deviation; a single value gives a zero-width interval)."""
    if not values:
        raise ConfigError("mean_interval needs at least one value, got none")
    mean = statistics.fmean(values)
    half = _Z95 * statistics.pstdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean - half, mean + half


def paired_interval(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """The mean of ``after[i] - before[i]`` with its 95% interval (sample standard deviation):
    ``{"mean", "low", "high", "n"}``. Both sequences score the same items in the same order."""
    if len(before) != len(after) or len(before) < 2:
        raise ConfigError(
            f"paired_interval needs two equal-length samples of >= 2, got {len(before)} and {len(after)}"
        )
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    mean = statistics.fmean(diffs)
    half = _Z95 * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": float(len(diffs))}
