"""The 95% intervals examples and reports compare checkpoints with, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from ludic_core.errors import ConfigError
from ludic_core.intervals import mean_interval, paired_interval


def test_mean_interval_by_hand() -> None:
    # mean 0.5, population sd 0.5, n 4: half width 1.96 * 0.5 / 2 = 0.49
    low, high = mean_interval([0.0, 1.0, 0.0, 1.0])
    assert math.isclose(low, 0.01) and math.isclose(high, 0.99)
    assert mean_interval([0.7]) == (0.7, 0.7)
    with pytest.raises(ConfigError, match="at least one value"):
        mean_interval([])


def test_paired_interval_by_hand() -> None:
    # differences 1, 1, 0, 0: mean 0.5, sample sd sqrt(1/3), n 4
    got = paired_interval([0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0])
    half = 1.96 * math.sqrt(1 / 3) / 2
    assert got["n"] == 4.0 and math.isclose(got["mean"], 0.5)
    assert math.isclose(got["low"], 0.5 - half) and math.isclose(got["high"], 0.5 + half)


def test_pairing_removes_the_spread_between_items() -> None:
    """Items that differ a lot but all improve by the same amount: an exact, zero-width interval."""
    before = [0.0, 10.0, 20.0, 30.0]
    got = paired_interval(before, [b + 1.0 for b in before])
    assert got["low"] == got["mean"] == got["high"] == 1.0


@pytest.mark.parametrize(("before", "after"), [([1.0], [1.0]), ([1.0, 2.0], [1.0])])
def test_paired_interval_refuses_unpaired_samples(before: list[float], after: list[float]) -> None:
    with pytest.raises(ConfigError, match=f"got {len(before)} and {len(after)}"):
        paired_interval(before, after)
