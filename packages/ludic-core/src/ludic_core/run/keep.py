"""``ludic rollouts --keep``: which rollouts go to the output file (rejection sampling, SFT data).

A filter is one or more conditions joined by ``,`` (all must hold), each over the rollout's record
(:func:`~ludic_core.evaluation.rollout_record`) and the env profile:

* ``all`` — every rollout;
* ``success`` — the profile's success (e.g. a correct QA answer, a won game);
* an outcome label of the profile (``win``, ``correct``, ``parse_error``...);
* ``<field><op><number>`` with op one of ``> >= < <= == !=`` (``reward`` is ``total_reward``);
* a bare record field (``reached_env``, ``correct``): kept when truthy; ``!field``: when falsy.

Failed episodes are never kept: their last turn may be cut mid-way.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable

from ludic_core.errors import ConfigError
from ludic_core.evaluation import Record
from ludic_core.run.profiles import EvalProfile

__all__ = ["KeepFilter", "parse_keep"]

KeepFilter = Callable[[Record], bool]

_COMPARISON = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|==|!=|>|<)\s*(\S+)$")
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
_ALIASES = {"reward": "total_reward"}


def _number(record: Record, field: str) -> float:
    value = record.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan  # a comparison with a missing or non-numeric field is false, never a crash
    return float(value)


def _condition(text: str, profile: EvalProfile) -> KeepFilter:
    if text == "all":
        return lambda record: True
    if text == "success":
        success = profile.success
        if success is None:
            raise ConfigError(
                "keep='success': this env's eval profile defines no success; use an outcome "
                f"({', '.join(profile.outcomes)}) or a comparison such as reward>0"
            )
        return lambda record: bool(success(record))
    if text in profile.outcomes:
        return lambda record: profile.label(record) == text
    match = _COMPARISON.match(text)
    if match:
        field, op, raw = match.groups()
        try:
            threshold = float(raw)
        except ValueError as exc:
            raise ConfigError(f"keep condition {text!r}: {raw!r} is not a number") from exc
        field = _ALIASES.get(field, field)
        compare = _OPERATORS[op]
        return lambda record: compare(_number(record, field), threshold)
    negate = text.startswith("!")
    field = text[1:] if negate else text
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", field):
        raise ConfigError(
            f"keep condition {text!r} is not understood; use all, success, an outcome "
            f"({', '.join(profile.outcomes)}), a comparison such as reward>0, or a field name"
        )
    return lambda record: bool(record.get(field)) != negate


def parse_keep(text: str, profile: EvalProfile) -> KeepFilter:
    """The filter ``text`` describes (see the module docstring)."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise ConfigError(f"keep filter {text!r} has an empty condition")
    conditions = [_condition(part, profile) for part in parts]
    return lambda record: not record.get("failed") and all(c(record) for c in conditions)
