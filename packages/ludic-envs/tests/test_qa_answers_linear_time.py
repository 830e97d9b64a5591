"""Answer extraction runs on raw model output: 1 MB of hostile text must not take quadratic time
(checked by CPU-time growth between two sizes, see :func:`ludic_core.testing.assert_linear_time`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ludic_core.testing import assert_linear_time
from ludic_envs.qa import gsm8k_answer, last_boxed, math_answer, normalize_math_answer, parse_number


@pytest.mark.parametrize(
    "make_text",
    [
        lambda n: "1" * n + "x",
        lambda n: "1" + " " * n + "1",
        lambda n: "1 " + "a " * (n // 2) + "1",
        lambda n: "-" + "1," * (n // 2),
    ],
    ids=["digits", "spaces", "unit-words", "commas"],
)
def test_normalize_math_answer_is_linear(make_text: Callable[[int], str]) -> None:
    assert_linear_time(normalize_math_answer, make_text)


@pytest.mark.parametrize(
    "make_text",
    [
        lambda n: "1,111" * (n // 5),
        lambda n: "$ " * (n // 2),
        lambda n: " " * n,
        lambda n: "\\boxed{" * (n // 7),
        lambda n: "\\boxed{" + "{" * n,
    ],
    ids=["numbers", "currency", "spaces", "unclosed-boxes", "open-braces"],
)
@pytest.mark.parametrize("extract", [parse_number, gsm8k_answer, math_answer, last_boxed])
def test_answer_extraction_is_linear(
    extract: Callable[[str], object], make_text: Callable[[int], str]
) -> None:
    assert_linear_time(extract, make_text)


def test_unit_words_still_stripped() -> None:
    assert normalize_math_answer("5 cm") == "5"
    assert normalize_math_answer("-1,234.5 square inches ") == "-1,234.5"


def test_numbers_too_long_to_convert_are_no_answer() -> None:
    # Python refuses to convert integers of more than 4300 digits; that is no answer, not a crash.
    assert parse_number("7 then " + "1" * 5000) is None
    assert gsm8k_answer("1" * 5000) is None
    assert gsm8k_answer("1" * 400 + "/3") == "1" * 400 + "/3"  # beyond float range: kept exact
