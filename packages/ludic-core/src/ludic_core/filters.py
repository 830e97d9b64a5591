"""Sample filters: ``SampleFilter(item) -> bool``, ``True`` keeps the item.

Filters read the meta keys the SAW builder writes (:mod:`ludic_core.saw_builder`). A missing key is a
:class:`~ludic_core.errors.DataError`, never a silent keep or drop: a filter that cannot see what it
filters on would quietly change the training distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWItem

__all__ = [
    "SampleFilter",
    "any_of",
    "apply_filter",
    "combine",
    "drop_incomplete_completions",
    "drop_parse_errors",
    "drop_truncated",
    "drop_truncated_episodes",
    "drop_zero_weight",
    "keep_agent_steps",
    "keep_all",
    "keep_env_steps",
]

SampleFilter: TypeAlias = Callable[[SAWItem], bool]


def _meta(item: SAWItem, key: str) -> Any:
    if key not in item.meta:
        raise DataError(
            f"sample filter needs meta[{key!r}] but the item (rollout {item.meta.get('rollout_id')!r}) has only "
            f"{sorted(item.meta)}"
        )
    return item.meta[key]


def keep_all(item: SAWItem) -> bool:
    return True


def drop_truncated(item: SAWItem) -> bool:
    """Drop the step the episode was cut at (``meta.truncated``), e.g. the last turn at ``max_steps``."""
    return not _meta(item, "truncated")


def drop_truncated_episodes(item: SAWItem) -> bool:
    """Drop every turn of a truncated episode (``meta.episode_truncated``): Monte-Carlo returns of a
    time-limited episode are biased on all its turns, not only the last one."""
    return not _meta(item, "episode_truncated")


def drop_incomplete_completions(item: SAWItem) -> bool:
    """Drop turns whose final completion hit ``max_tokens`` (``finish_reason == "length"``)."""
    return not (_meta(item, "finish_reason") == "length" or item.meta.get("incomplete_completion", False))


def drop_parse_errors(item: SAWItem) -> bool:
    return not _meta(item, "parse_error")


def keep_env_steps(item: SAWItem) -> bool:
    """Keep turns that reached the env (``step_kind == "env"``)."""
    return _meta(item, "step_kind") == "env"


def keep_agent_steps(item: SAWItem) -> bool:
    """Keep turns that ended without an env step (parse failures, internal-only attempts)."""
    return _meta(item, "step_kind") == "agent"


def drop_zero_weight(eps: float = 1e-4) -> SampleFilter:
    """Keep items with ``|weight| > eps``: zero-advantage items (e.g. GRPO groups that all won or all
    lost) cost compute and contribute no gradient."""
    if not (math.isfinite(eps) and eps >= 0):
        raise ConfigError(f"drop_zero_weight: eps must be finite and >= 0, got {eps!r}")

    def keep(item: SAWItem) -> bool:
        return abs(item.weight) > eps

    keep.__name__ = f"drop_zero_weight(eps={eps!r})"
    return keep


def combine(*filters: SampleFilter) -> SampleFilter:
    """Keep an item only if every filter keeps it (AND; no filters keeps everything)."""

    def keep(item: SAWItem) -> bool:
        return all(f(item) for f in filters)

    keep.__name__ = "combine(" + ", ".join(getattr(f, "__name__", repr(f)) for f in filters) + ")"
    return keep


def any_of(*filters: SampleFilter) -> SampleFilter:
    """Keep an item if at least one filter keeps it (OR; no filters keeps nothing)."""

    def keep(item: SAWItem) -> bool:
        return any(f(item) for f in filters)

    keep.__name__ = "any_of(" + ", ".join(getattr(f, "__name__", repr(f)) for f in filters) + ")"
    return keep


def apply_filter(items: Iterable[SAWItem], sample_filter: SampleFilter | None) -> tuple[list[SAWItem], int]:
    """``(kept items, number dropped)``; ``None`` keeps everything."""
    items = list(items)
    if sample_filter is None:
        return items, 0
    kept = [item for item in items if sample_filter(item)]
    return kept, len(items) - len(kept)
