"""The linear-growth check (``ludic_core.testing.assert_linear_time``) tells linear from quadratic work."""

from __future__ import annotations

import pytest

from ludic_core.testing import assert_linear_time


def test_the_check_catches_quadratic_work() -> None:
    def quadratic(text: str) -> int:
        # Slicing the rest at every position copies O(n^2) characters, as a backtracking regex would scan.
        return sum(len(text[i:]) for i in range(0, len(text), 64))

    with pytest.raises(AssertionError, match="CPU time"):
        assert_linear_time(quadratic, lambda n: "x" * n)


def test_the_check_passes_linear_work() -> None:
    assert_linear_time(lambda text: text.count("x"), lambda n: "x" * n)
