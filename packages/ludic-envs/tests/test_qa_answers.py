from __future__ import annotations

from fractions import Fraction

import pytest

from ludic_envs.qa import (
    extract_gsm8k_target,
    gsm8k_answer,
    last_boxed,
    math_answers_equivalent,
    normalize_math_answer,
    numbers_match,
    parse_number,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("18", Fraction(18)),
        ("$1,234.50", Fraction(246900, 200)),
        ("The answer is -18 dollars.", Fraction(-18)),
        ("−7 degrees", Fraction(-7)),
        ("+3", Fraction(3)),
        ("3/4 cup", Fraction(3, 4)),
        (".5", Fraction(1, 2)),
        ("18.00", Fraction(18)),
        ("first 2 then 40%", Fraction(40)),
        ("no number", None),
    ],
)
def test_parse_number(text: str, value: Fraction | None) -> None:
    assert parse_number(text) == value


def test_numbers_match_is_exact() -> None:
    assert numbers_match("1,000 apples", "1000")
    assert not numbers_match("1000.01", "1000")
    assert not numbers_match("-5", "5")
    assert not numbers_match("none", "5")


def test_gsm8k_answer_extraction_order() -> None:
    assert extract_gsm8k_target("work\n#### 1,200") == "1,200"
    assert gsm8k_answer("3 + 4 = 7\n#### 7 apples") == "7"
    assert gsm8k_answer("so \\boxed{12} and 13 later") == "12"
    assert gsm8k_answer("she pays 5 then 2.5 more") == "2.5"
    assert gsm8k_answer("I do not know") is None


def test_last_boxed_handles_nesting_and_escapes() -> None:
    text = r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}} end"
    assert last_boxed(text) == r"\frac{1}{\sqrt{2}}"
    assert last_boxed(r"\boxed{\{1,2\}}") == r"\{1,2\}"
    assert last_boxed(r"\boxed 5$") == "5"
    assert last_boxed(r"\fbox{x}") == "x"
    assert last_boxed(r"\boxed{unclosed") is None
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (r"\dfrac{1}{2}", r"\frac12"),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"),
        ("x = 5", "5"),
        (r"10\%", "10"),
        (r"5\text{ cm}", "5"),
        ("1,000", "1000"),
        (r"90^\circ", "90"),
    ],
)
def test_normalised_forms_agree(a: str, b: str) -> None:
    assert normalize_math_answer(a) == normalize_math_answer(b)
    assert math_answers_equivalent(a, b, use_math_verify=False)


def test_math_verify_decides_symbolic_equivalence() -> None:
    pytest.importorskip("math_verify", reason="math-verify comes with the hf/math extra")
    assert math_answers_equivalent(r"\frac{1}{2}", "0.5")
    assert math_answers_equivalent(r"\frac{\sqrt3}{2}", r"\frac{\sqrt{3}}{2}")
    assert not math_answers_equivalent(r"\frac{1}{3}", "0.5")
    # Without it, only normal forms count.
    assert not math_answers_equivalent(r"\frac{1}{2}", "0.5", use_math_verify=False)
