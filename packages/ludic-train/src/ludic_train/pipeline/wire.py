"""The pipeline's wire format: one JSON message per actor batch.

An actor pushes each batch it generates as **one** Redis list element, so the items of a GRPO group
(credit was computed over the whole group on the actor) always reach the learner together. A message
is a UTF-8 JSON object::

    {
        "format": "ludic.pipeline.batch",  # what this is (anything else on the queue is refused)
        "wire_version": 1,  # bumped on incompatible changes; readers refuse others
        "actor_id": "host:1234:9f2c",  # who produced it
        "batch_index": 7,  # the actor's step counter for this batch
        "created_at": 1718000000.123,  # unix time the actor pushed it (queue-age metrics)
        "policy_version": 3,  # the oldest policy_version among the items
        "num_rollouts": 8,  # distinct rollouts the items come from
        "meta": {...},  # the actor's batch meta (episode counts, rewards, ...)
        "items": [SAWItem.to_dict(), ...],  # each with its own schema_version and meta.policy_version
    }

JSON, never pickle: the learner must not execute whatever bytes land on a shared queue, and messages
stay readable with ``redis-cli``. Floats round-trip exactly (``repr``); NaN/inf are refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ludic_core.errors import DataError
from ludic_core.saw import SAWItem

__all__ = [
    "DEFAULT_QUEUE_KEY",
    "WIRE_FORMAT",
    "WIRE_VERSION",
    "BatchMessage",
    "count_rollouts",
    "dead_letter_key",
    "decode_message",
    "encode_message",
    "excerpt",
]

WIRE_FORMAT = "ludic.pipeline.batch"
WIRE_VERSION = 1

DEFAULT_QUEUE_KEY = "ludic:pipeline:batches"
"""The Redis list actors RPUSH to and the learner BLPOPs from (one list per training run)."""


def dead_letter_key(queue_key: str) -> str:
    """Where the learner moves messages it cannot decode: ``<queue_key>:dead`` (a Redis list)."""
    return f"{queue_key}:dead"


_EXCERPT_CHARS = 200


def excerpt(raw: bytes | str, limit: int = _EXCERPT_CHARS) -> str:
    """The start of a raw message, for error messages (with its total size)."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    head = text[:limit] + ("…" if len(text) > limit else "")
    return f"{head!r} ({len(raw)} {'bytes' if isinstance(raw, bytes) else 'chars'})"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def count_rollouts(items: Sequence[SAWItem]) -> int:
    """Distinct ``meta["rollout_id"]`` values; an item without one counts as its own rollout."""
    ids = {item.meta.get("rollout_id") for item in items if item.meta.get("rollout_id") is not None}
    return len(ids) + sum(1 for item in items if item.meta.get("rollout_id") is None)


def _to_tuple(items: Iterable[SAWItem]) -> tuple[SAWItem, ...]:
    return tuple(items)


def _check_items(_instance: Any, _attribute: Any, items: tuple[SAWItem, ...]) -> None:
    if not items:
        raise DataError("BatchMessage.items must not be empty")
    for i, item in enumerate(items):
        if not isinstance(item, SAWItem):
            raise DataError(f"BatchMessage.items[{i}] must be a SAWItem, got {type(item).__name__}")
        version = item.meta.get("policy_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise DataError(
                f"BatchMessage.items[{i}] (rollout {item.meta.get('rollout_id')!r}) has policy_version "
                f"{version!r}; every pipeline item needs an int >= 0 for staleness control"
            )


@attrs.frozen
class BatchMessage:
    """One actor batch on the queue (see the module docstring for the JSON layout)."""

    items: tuple[SAWItem, ...] = attrs.field(converter=_to_tuple, validator=_check_items)
    actor_id: str
    batch_index: int
    created_at: float
    meta: dict[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.actor_id, str) or not self.actor_id:
            raise DataError(f"BatchMessage.actor_id must be a non-empty str, got {self.actor_id!r}")
        if not _is_int(self.batch_index) or self.batch_index < 0:
            raise DataError(f"BatchMessage.batch_index must be an int >= 0, got {self.batch_index!r}")
        if (
            isinstance(self.created_at, bool)
            or not isinstance(self.created_at, (int, float))
            or not math.isfinite(self.created_at)
        ):
            raise DataError(f"BatchMessage.created_at must be a finite number, got {self.created_at!r}")
        if not isinstance(self.meta, dict):
            raise DataError(f"BatchMessage.meta must be a dict, got {type(self.meta).__name__}")

    @property
    def policy_version(self) -> int:
        """The oldest version among the items: what staleness control must assume for the batch."""
        return min(int(item.meta["policy_version"]) for item in self.items)

    @property
    def num_rollouts(self) -> int:
        return count_rollouts(self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": WIRE_FORMAT,
            "wire_version": WIRE_VERSION,
            "actor_id": self.actor_id,
            "batch_index": self.batch_index,
            "created_at": self.created_at,
            "policy_version": self.policy_version,
            "num_rollouts": self.num_rollouts,
            "meta": self.meta,
            "items": [item.to_dict() for item in self.items],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchMessage:
        if data.get("format") != WIRE_FORMAT:
            raise DataError(
                f"not a Ludic pipeline message: format is {data.get('format')!r}, expected {WIRE_FORMAT!r}"
            )
        version = data.get("wire_version")
        if version != WIRE_VERSION:
            raise DataError(
                f"pipeline wire_version {version!r} is not supported (this reader speaks {WIRE_VERSION})"
            )
        raw_items = data.get("items")
        if not isinstance(raw_items, list):
            raise DataError(f"'items' must be a list, got {type(raw_items).__name__}")
        items = []
        for i, raw in enumerate(raw_items):
            if not isinstance(raw, Mapping):
                raise DataError(f"items[{i}] must be an object, got {type(raw).__name__}")
            try:
                items.append(SAWItem.from_dict(raw))
            except DataError as exc:
                raise DataError(f"items[{i}]: {exc}") from exc
            except (TypeError, ValueError) as exc:  # e.g. a string where token ids belong
                raise DataError(f"items[{i}]: {type(exc).__name__}: {exc}") from exc
        meta = data.get("meta", {})
        message = cls(
            items=tuple(items),
            actor_id=data.get("actor_id"),  # type: ignore[arg-type]  # validated in __attrs_post_init__
            batch_index=data.get("batch_index"),  # type: ignore[arg-type]
            created_at=data.get("created_at"),  # type: ignore[arg-type]
            meta=meta,
        )
        # The header repeats two derived values for readers that skip the items (redis-cli, dashboards);
        # a mismatch means the message was edited or produced by a broken writer.
        for key, derived in (
            ("policy_version", message.policy_version),
            ("num_rollouts", message.num_rollouts),
        ):
            if data.get(key) != derived:
                raise DataError(f"header {key}={data.get(key)!r} disagrees with the items ({derived})")
        return message


def encode_message(message: BatchMessage) -> bytes:
    """Compact UTF-8 JSON; raises :class:`DataError` if some meta value is not JSON."""
    try:
        text = json.dumps(message.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"batch {message.batch_index} of actor {message.actor_id!r} is not JSON-serialisable "
            f"(item or batch meta holds a non-JSON value): {exc}"
        ) from exc
    return text.encode("utf-8")


def decode_message(raw: bytes | str) -> BatchMessage:
    """Parse and validate one message; any defect raises :class:`DataError` quoting the message start."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"pipeline message is not valid JSON ({exc}): {excerpt(raw)}") from exc
    if not isinstance(data, dict):
        raise DataError(f"pipeline message must be a JSON object, got {type(data).__name__}: {excerpt(raw)}")
    try:
        return BatchMessage.from_dict(data)
    except DataError as exc:
        raise DataError(f"invalid pipeline message: {exc}; message starts {excerpt(raw)}") from exc
