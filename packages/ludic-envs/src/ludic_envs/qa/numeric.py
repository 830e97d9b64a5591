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
    # The lookahead only skips positions where nothing but an empty match is possible, cheaply.
    r"(?=[-+−$€£./\d\s])(?<![\w.])(?P<sign>[-+−]?)\s*[$€£]?\s*"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?P<frac>\.\d+)?"
    r"(?:\s*/\s*(?P<den>\d+))?"
)


def _states_a_number(match: re.Match[str]) -> bool:
    if match.group("int") is None and match.group("frac") is None:
        return False
    denominator = match.group("den")
    return denominator is None or denominator.strip("0") != ""


def _to_fraction(match: re.Match[str]) -> Fraction | None:
    whole, decimals, denominator = match.group("int"), match.group("frac"), match.group("den")
    try:
        value = Fraction((whole or "0").replace(",", "") + (decimals or ""))
        if denominator is not None:
            value /= int(denominator)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits())
        return None
    return -value if match.group("sign") in ("-", "−") else value


def last_number(text: str) -> Fraction | None:
    """The last number written in ``text`` (the final answer usually comes last), or None.

    None too when that number has more digits than Python converts to an integer (4300 by
    default): an earlier number is not the answer the text commits to.
    """
    # Only the last number is converted: converting every one costs far more than finding them.
    last: re.Match[str] | None = None
    for match in _NUMBER.finditer(text):
        if _states_a_number(match):
            last = match
    return None if last is None else _to_fraction(last)


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
