"""Numeric answers (GSM8K style): find the number in a text and compare numbers exactly.

Numbers are compared as :class:`fractions.Fraction`, so ``18``, ``18.00`` and ``$18`` are equal and
no float rounding is involved. Thousands separators (``1,234``), signs (``-3``, ``+3``, the Unicode
minus ``−3``), currency symbols, percent signs and trailing unit words (``18 dollars``) are tolerated.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["extract_gsm8k_target", "last_number", "numbers_match", "parse_number"]

# A sign, then digits with optional thousands separators, an optional decimal part, or a bare ".5".
# A simple fraction "3/4" is one number.
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+−]?)\s*[$€£]?\s*"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?P<frac>\.\d+)?"
    r"(?:\s*/\s*(?P<den>\d+))?"
)


def _to_fraction(match: re.Match[str]) -> Fraction | None:
    whole, decimals, denominator = match.group("int"), match.group("frac"), match.group("den")
    if whole is None and decimals is None:
        return None
    value = Fraction((whole or "0").replace(",", "") + (decimals or ""))
    if denominator is not None:
        if int(denominator) == 0:
            return None
        value /= int(denominator)
    return -value if match.group("sign") in ("-", "−") else value


def _numbers(text: str) -> list[Fraction]:
    found = []
    for match in _NUMBER.finditer(text):
        value = _to_fraction(match)
        if value is not None:
            found.append(value)
    return found


def last_number(text: str) -> Fraction | None:
    """The last number written in ``text`` (the final answer usually comes last), or None."""
    numbers = _numbers(text)
    return numbers[-1] if numbers else None


def parse_number(text: str) -> Fraction | None:
    """The number an answer string states, e.g. ``"$1,234.50"`` or ``"18 dollars"``; None if none."""
    return last_number(text)


def extract_gsm8k_target(answer: str) -> str:
    """The final answer of a GSM8K ``answer`` field: the text after the last ``####``, stripped."""
    marker = answer.rfind("####")
    if marker < 0:
        return answer.strip()
    return answer[marker + 4 :].strip()


def numbers_match(predicted: str, target: str) -> bool:
    """True when both texts state a number and the numbers are equal."""
    a, b = parse_number(predicted), parse_number(target)
    return a is not None and b is not None and a == b
