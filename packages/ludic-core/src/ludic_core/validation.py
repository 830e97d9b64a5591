"""Checks for settings: type, finiteness and range, each failure a :class:`ConfigError` naming the
owner, the field and the value.

Two forms of each check: an attrs validator (``attrs.field(validator=positive_number())``, named from
the class and the attribute) and a plain function for hand-written constructors
(``check_number("RedisBatchSource.wait_timeout_s", value, minimum=0, exclusive=True)``).

``bool`` is never a number here (``True`` is an ``int`` to Python, and ``lr=True`` is a mistake), and
NaN or infinity is never a setting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import attrs

from ludic_core.errors import ConfigError

__all__ = [
    "Validator",
    "boolean",
    "check_bool",
    "check_int",
    "check_number",
    "check_one_of",
    "int_at_least",
    "non_negative_number",
    "number_in",
    "one_of",
    "positive_number",
]

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def check_int(name: str, value: object, minimum: int | None = None, *, optional: bool = False) -> None:
    """An ``int`` (not a ``bool``) of at least ``minimum``; ``None`` passes when ``optional``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ConfigError(f"{name} must be an int{bound}{' or None' if optional else ''}, got {value!r}")


def check_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive: bool = False,
    optional: bool = False,
) -> None:
    """A finite int or float within ``[minimum, maximum]`` (open at both ends when ``exclusive``)."""
    if value is None and optional:
        return
    # An int is finite however large (math.isfinite would overflow converting it).
    ok = isinstance(value, int) and not isinstance(value, bool)
    ok = ok or (isinstance(value, float) and math.isfinite(value))
    number: float = value if ok else 0.0  # type: ignore[assignment]
    if ok and minimum is not None:
        ok = number > minimum if exclusive else number >= minimum
    if ok and maximum is not None:
        ok = number < maximum if exclusive else number <= maximum
    if not ok:
        bounds = []
        if minimum is not None:
            bounds.append(f"{'>' if exclusive else '>='} {minimum}")
        if maximum is not None:
            bounds.append(f"{'<' if exclusive else '<='} {maximum}")
        range_text = f" {' and '.join(bounds)}" if bounds else ""
        raise ConfigError(
            f"{name} must be a finite number{range_text}{' or None' if optional else ''}, got {value!r}"
        )


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")


def check_one_of(name: str, value: object, choices: Collection[object]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _named(instance: Any, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def int_at_least(minimum: int, *, optional: bool = False) -> Validator:
    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_int(_named(instance, attribute), value, minimum, optional=optional)

    return validate


def positive_number(*, optional: bool = False) -> Validator:
    """A finite number > 0."""

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(_named(instance, attribute), value, minimum=0, exclusive=True, optional=optional)

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
