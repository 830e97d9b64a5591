"""Checks for settings: type, finiteness and range, each failure a :class:`ConfigError` (or the error the
caller names: a ``DataError`` for data read from a file or the wire) naming the owner, the field and
the value.

Two forms of each check: an attrs validator (``attrs.field(validator=positive_number())``, named from
the class and the attribute) and a plain function for hand-written constructors
(``check_number("RedisBatchSource.wait_timeout_s", value, minimum=0, exclusive=True)``).

``bool`` is never a number here (``True`` is an ``int`` to Python, and ``lr=True`` is a mistake), and
NaN or infinity is never a setting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import attrs

from ludic_core.errors import ConfigError, LudicError

__all__ = [
    "Validator",
    "boolean",
    "check_bool",
    "check_int",
    "check_number",
    "check_one_of",
    "check_some_of",
    "finite_number",
    "int_at_least",
    "non_negative_number",
    "number_in",
    "one_of",
    "positive_number",
]

T = TypeVar("T")

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def check_int(
    name: str,
    value: object,
    minimum: int | None = None,
    *,
    maximum: int | None = None,
    optional: bool = False,
    error: type[LudicError] = ConfigError,
) -> Any:
    """An ``int`` (not a ``bool``) within ``[minimum, maximum]``; ``None`` passes when ``optional``.
    Returns ``value``; raises ``error`` (data read from a file or the wire is a ``DataError``)."""
    if value is None and optional:
        return value
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise error(
            f"{name} must be an int{_bounds(minimum, maximum, False)}{_or_none(optional)}, got {value!r}"
        )
    return value


def check_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive: bool = False,
    optional: bool = False,
    error: type[LudicError] = ConfigError,
) -> Any:
    """A finite int or float within ``[minimum, maximum]`` (open at both ends when ``exclusive``).
    Returns ``value``; raises ``error``."""
    if value is None and optional:
        return value
    # An int is finite however large (math.isfinite would overflow converting it).
    ok = isinstance(value, int) and not isinstance(value, bool)
    ok = ok or (isinstance(value, float) and math.isfinite(value))
    number: float = value if ok else 0.0  # type: ignore[assignment]
    if ok and minimum is not None:
        ok = number > minimum if exclusive else number >= minimum
    if ok and maximum is not None:
        ok = number < maximum if exclusive else number <= maximum
    if not ok:
        bounds = _bounds(minimum, maximum, exclusive)
        raise error(f"{name} must be a finite number{bounds}{_or_none(optional)}, got {value!r}")
    return value


def _bounds(minimum: float | None, maximum: float | None, exclusive: bool) -> str:
    low, high = (">", "<") if exclusive else (">=", "<=")
    bounds = [f"{op} {bound}" for op, bound in ((low, minimum), (high, maximum)) if bound is not None]
    return " " + " and ".join(bounds) if bounds else ""


def _or_none(optional: bool) -> str:
    return " or None" if optional else ""


def check_bool(name: str, value: object, *, error: type[LudicError] = ConfigError) -> None:
    if not isinstance(value, bool):
        raise error(f"{name} must be true or false, got {value!r}")


def check_one_of(name: str, value: object, choices: Collection[object]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def check_some_of(name: str, values: Sequence[T], choices: Collection[T]) -> tuple[T, ...]:
    """``values`` as a tuple: a non-empty sequence (not a string) of ``choices``."""
    if isinstance(values, str) or not values:
        raise ConfigError(f"{name} must be a non-empty sequence of {tuple(choices)}, got {values!r}")
    unknown = [v for v in values if v not in choices]
    if unknown:
        raise ConfigError(f"{name}: unknown value(s) {unknown!r} in {values!r}; known: {tuple(choices)}")
    return tuple(values)


def _named(instance: Any, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def int_at_least(minimum: int, *, maximum: int | None = None, optional: bool = False) -> Validator:
    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_int(_named(instance, attribute), value, minimum, maximum=maximum, optional=optional)

    return validate


def positive_number(*, optional: bool = False) -> Validator:
    """A finite number > 0."""

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(_named(instance, attribute), value, minimum=0, exclusive=True, optional=optional)

    return validate


def finite_number(*, optional: bool = False) -> Validator:
    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(_named(instance, attribute), value, optional=optional)

    return validate


def non_negative_number(*, optional: bool = False) -> Validator:
    """A finite number >= 0."""

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(_named(instance, attribute), value, minimum=0, optional=optional)

    return validate


def number_in(minimum: float, maximum: float, *, optional: bool = False) -> Validator:
    """A finite number in ``[minimum, maximum]``."""

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(_named(instance, attribute), value, minimum=minimum, maximum=maximum, optional=optional)

    return validate


def boolean() -> Validator:
    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_bool(_named(instance, attribute), value)

    return validate


def one_of(*choices: object) -> Validator:
    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_one_of(_named(instance, attribute), value, choices)

    return validate
