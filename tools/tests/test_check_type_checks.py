"""tools/check_type_checks.py counts an int/bool ``isinstance`` only where an ``if`` raises on it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from check_type_checks import hand_written_checks

SOURCE = """
def f(x, y, z):
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(x)
    if not isinstance(y, (str, int)):
        raise TypeError(y)
    if isinstance(z, float):
        raise ValueError(z)
    if isinstance(x, int):
        return x
    return [v for v in (x, y) if isinstance(v, bool)]
"""


def test_counts_raising_int_and_bool_checks_only() -> None:
    assert [line for line, _ in hand_written_checks(SOURCE)] == [3, 5]
