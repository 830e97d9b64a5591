"""Settings checks: every bad value names the owner, the field and the value."""

from __future__ import annotations

import math

import attrs
import pytest

from ludic_core.errors import ConfigError
from ludic_core.validation import (
    boolean,
    check_int,
    check_number,
    check_some_of,
    int_at_least,
    non_negative_number,
    number_in,
    one_of,
    positive_number,
)


@attrs.frozen
class Settings:
    steps: int = attrs.field(default=1, validator=int_at_least(1))
    every: int | None = attrs.field(default=None, validator=int_at_least(1, optional=True))
    lr: float = attrs.field(default=0.1, validator=positive_number())
    decay: float = attrs.field(default=0.0, validator=non_negative_number())
    p: float = attrs.field(default=0.5, validator=number_in(0.0, 1.0))
    on: bool = attrs.field(default=True, validator=boolean())
    mode: str = attrs.field(default="a", validator=one_of("a", "b"))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("steps", 0, "Settings.steps must be an int >= 1, got 0"),
        ("steps", 1.5, "Settings.steps must be an int >= 1, got 1.5"),
        ("steps", True, "Settings.steps must be an int >= 1, got True"),
        ("every", 0, "Settings.every must be an int >= 1 or None, got 0"),
        ("lr", True, "Settings.lr must be a finite number > 0, got True"),
        ("lr", math.nan, "Settings.lr must be a finite number > 0, got nan"),
        ("lr", 0, "Settings.lr must be a finite number > 0, got 0"),
        ("lr", "0.1", "Settings.lr must be a finite number > 0, got '0.1'"),
        ("decay", math.inf, "Settings.decay must be a finite number >= 0, got inf"),
        ("decay", -1e-9, "Settings.decay must be a finite number >= 0, got -1e-09"),
        ("p", 1.5, "Settings.p must be a finite number >= 0.0 and <= 1.0, got 1.5"),
        ("on", 1, "Settings.on must be true or false, got 1"),
        ("mode", "c", "Settings.mode must be one of 'a', 'b', got 'c'"),
    ],
)
def test_each_bad_value_is_named(field: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings(**{field: value})  # type: ignore[arg-type]
    assert str(raised.value) == match


def test_good_values_pass_and_huge_ints_are_finite() -> None:
    Settings(steps=10**400, every=None, lr=1e-30, decay=0, p=1.0, on=False, mode="b")
    check_number("x", 10**400, minimum=0)
    check_int("x", None, 0, optional=True)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ((), r"methods must be a non-empty sequence of \('a', 'b'\), got \(\)"),
        ("a", r"methods must be a non-empty sequence of \('a', 'b'\), got 'a'"),
        (("a", "c"), r"methods: unknown value\(s\) \['c'\] in \('a', 'c'\); known: \('a', 'b'\)"),
    ],
)
def test_check_some_of_names_what_is_not_a_choice(values: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_some_of("methods", values, ("a", "b"))  # type: ignore[arg-type]


def test_check_some_of_returns_the_values_as_a_tuple() -> None:
    assert check_some_of("methods", ["b", "a"], ("a", "b")) == ("b", "a")
