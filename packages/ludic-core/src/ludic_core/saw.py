"""State–Action–Weight training samples: what a trainer consumes.

One :class:`SAWItem` per agent turn: the turn's model calls concatenated into one token sequence,
``action_mask`` = 1 exactly on sampled completion tokens, ``weight`` the credit of the turn.
Items serialise to plain lists, numbers and strings (JSON/msgpack friendly) with a schema version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_core.data_fields import (
    check_floats,
    check_ints,
    check_temperature,
    to_float_or_none,
    to_float_tuple_or_none,
    to_tuple,
)
from ludic_core.errors import DataError

__all__ = ["LOGP_TOLERANCE", "SAW_SCHEMA_VERSION", "BatchSource", "SAWBatch", "SAWItem"]

SAW_SCHEMA_VERSION = 1

LOGP_TOLERANCE = 1e-4
"""How far above 0 a logprob may be: samplers compute ``x - logsumexp(x)`` in low precision and can
return a rounding error like ``+1e-7`` for a certain token; anything larger is not a logprob. Shared by
the trainer's item guards and the pipeline's wire checks."""


def _check_binary(_instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    check_ints(_instance, attribute, value)
    # Counting in C: once check_ints has ruled out bools and floats, only 0 and 1 compare equal to 0
    # or 1, so the counts cover the whole mask exactly when it is binary. The Python scan runs only to
    # name the first bad entry.
    if value.count(0) + value.count(1) == len(value):
        return
    bad = next((i, v) for i, v in enumerate(value) if v not in (0, 1))
    raise DataError(f"{attribute.name} must hold only 0/1; got {bad[1]!r} at position {bad[0]}")


def _check_schema_version(data: Mapping[str, Any], what: str) -> None:
    version = data.get("schema_version", SAW_SCHEMA_VERSION)
    if version != SAW_SCHEMA_VERSION:
        raise DataError(f"{what} schema_version {version!r} is not supported (expected {SAW_SCHEMA_VERSION})")


def _check_legacy_attention(data: Mapping[str, Any]) -> None:
    # Files written while items still carried an (always all-ones) attention mask read as before; a
    # padded one would put pad tokens into training, so it is refused rather than silently kept.
    attention = data.get("attention_mask")
    if attention is None:
        return
    ids = data["input_ids"]
    if (
        not isinstance(attention, (list, tuple))
        or len(attention) != len(ids)
        or any(a != 1 for a in attention)
    ):
        raise DataError(
            "SAWItem data has an attention_mask with zeros (padding); items hold real tokens only: strip "
            f"the padded positions from input_ids/action_mask/logprobs first (attention_mask={attention!r})"
        )


@attrs.frozen
class SAWItem:
    """One training sample.

    Every token of ``input_ids`` is real (a trainer pads when it collates, and builds the attention mask
    then), so an item has no attention mask of its own. ``action_mask`` marks the sampled tokens the
    loss trains on.

    ``actor_logps`` (behaviour-policy logprob per action token, in order) and ``teacher_logps`` (for
    distillation) have one entry per ``action_mask`` one, or are ``None``. ``meta`` holds scalars and
    short lists only — never prompt token lists.

    ``sampling_temperature`` is the temperature the turn's model calls sampled with: ``actor_logps`` are
    logprobs under ``softmax(logits / sampling_temperature)``, and a trainer must score the same
    distribution for its importance ratios to be right. 0 is greedy decoding, whose logprobs clients
    return untempered, so a trainer treats it as 1; ``None`` (unknown, e.g. items written before the
    field existed or built by hand) is treated as 1 too.
    """

    input_ids: tuple[int, ...] = attrs.field(converter=to_tuple, validator=check_ints)
    action_mask: tuple[int, ...] = attrs.field(converter=to_tuple, validator=_check_binary)
    weight: float = attrs.field(converter=float)
    meta: dict[str, Any] = attrs.field(factory=dict)
    actor_logps: tuple[float, ...] | None = attrs.field(
        default=None, converter=to_float_tuple_or_none, validator=check_floats
    )
    teacher_logps: tuple[float, ...] | None = attrs.field(
        default=None, converter=to_float_tuple_or_none, validator=check_floats
    )
    sampling_temperature: float | None = attrs.field(
        default=None, converter=to_float_or_none, validator=check_temperature
    )

    def __attrs_post_init__(self) -> None:
        n = len(self.input_ids)
        if n == 0:
            raise DataError("SAWItem.input_ids must not be empty")
        if len(self.action_mask) != n:
            raise DataError(f"SAWItem.action_mask has length {len(self.action_mask)}, input_ids has {n}")
        if not math.isfinite(self.weight):
            raise DataError(f"SAWItem.weight must be finite, got {self.weight!r}")
        n_actions = self.num_action_tokens
        for name in ("actor_logps", "teacher_logps"):
            logps = getattr(self, name)
            if logps is not None and len(logps) != n_actions:
                raise DataError(
                    f"SAWItem.{name} has {len(logps)} entries but action_mask has {n_actions} ones"
                )

    @property
    def num_action_tokens(self) -> int:
        return sum(self.action_mask)

    def __len__(self) -> int:
        return len(self.input_ids)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SAW_SCHEMA_VERSION,
            "input_ids": list(self.input_ids),
            "action_mask": list(self.action_mask),
            "weight": self.weight,
            "meta": self.meta,
            "actor_logps": None if self.actor_logps is None else list(self.actor_logps),
            "teacher_logps": None if self.teacher_logps is None else list(self.teacher_logps),
            "sampling_temperature": self.sampling_temperature,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SAWItem:
        _check_schema_version(data, "SAWItem")
        missing = [k for k in ("input_ids", "action_mask", "weight") if k not in data]
        if missing:
            raise DataError(f"SAWItem data is missing {missing}")
        _check_legacy_attention(data)
        return cls(
            input_ids=data["input_ids"],
            action_mask=data["action_mask"],
            weight=data["weight"],
            meta=dict(data.get("meta") or {}),
            actor_logps=data.get("actor_logps"),
            teacher_logps=data.get("teacher_logps"),
            # Absent from items serialised before the field existed: unknown.
            sampling_temperature=data.get("sampling_temperature"),
        )


@attrs.define
class SAWBatch:
    """A macro-batch of items plus batch-level metadata (counts, averages, source)."""

    items: list[SAWItem] = attrs.field(factory=list)
    meta: dict[str, Any] = attrs.field(factory=dict)

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        # The item count and the batch meta, not every item's token ids (megabytes for a batch; on
        # Python 3.11 and 3.12 asyncio.run builds the repr of the value its coroutine returns, twice).
        return f"SAWBatch(<{len(self.items)} items>, meta={self.meta!r})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SAW_SCHEMA_VERSION,
            "items": [i.to_dict() for i in self.items],
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SAWBatch:
        _check_schema_version(data, "SAWBatch")
        items: Sequence[Mapping[str, Any]] = data.get("items") or []
        return cls(items=[SAWItem.from_dict(i) for i in items], meta=dict(data.get("meta") or {}))


@runtime_checkable
class BatchSource(Protocol):
    """Where a trainer gets its macro-batches. The trainer never sees episodes or envs."""

    async def next_batch(self) -> SAWBatch: ...
