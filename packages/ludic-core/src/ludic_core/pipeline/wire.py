"""The pipeline's wire format: one msgpack message per actor batch, token arrays packed in binary.

Each actor batch is **one** Redis list element, so a GRPO group reaches the learner whole. A message is
a msgpack map with ``format`` (``"ludic.pipeline.batch"``), ``wire_version`` (3; readers refuse others),
``actor_id``, ``batch_index``, ``created_at`` (unix time of the push), ``policy_version`` (the oldest
among the items), ``num_rollouts``, ``meta`` (the actor's batch meta) and ``items``, packed columns
(:mod:`ludic_core.pipeline.columns`, about 6 bytes per token). msgpack, never pickle: a learner must not
execute whatever lands on a shared queue. Floats outside the logprob columns are float64 and round-trip
exactly; NaN/inf are refused in every meta; sizes are bounded by :class:`WireLimits`. ``python -m
ludic_core.pipeline.dump`` prints queued messages as JSON.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

import attrs

from ludic_core.errors import DataError, missing_extra
from ludic_core.pipeline.columns import check_finite_meta, pack_items, unpack_items
from ludic_core.pipeline.packing import Buffer, Unpackable, map_parts, packb, packed_or_none
from ludic_core.saw import SAWItem
from ludic_core.validation import check_int, check_number

__all__ = [
    "DEFAULT_QUEUE_KEY",
    "DEFAULT_WIRE_LIMITS",
    "WIRE_FORMAT",
    "WIRE_VERSION",
    "BatchMessage",
    "EncodedMessage",
    "WireLimits",
    "count_rollouts",
    "dead_letter_key",
    "decode_message",
    "encode_message",
    "encode_parts",
    "excerpt",
]

WIRE_FORMAT = "ludic.pipeline.batch"
WIRE_VERSION = 3

DEFAULT_QUEUE_KEY = "ludic:pipeline:batches"
"""The Redis list actors RPUSH to and the learner pops from (one list per training run)."""


def dead_letter_key(queue_key: str) -> str:
    """Where the learner moves messages it cannot decode: ``<queue_key>:dead`` (a Redis list)."""
    return f"{queue_key}:dead"


_EXCERPT_CHARS = 200


def excerpt(raw: bytes | str, limit: int = _EXCERPT_CHARS) -> str:
    """The start of a raw message, for error messages (with its total size); bytes stay bytes, since
    a binary message decoded as text would be noise."""
    head = raw[:limit]
    return f"{head!r}{'…' if len(raw) > limit else ''} ({len(raw)} {'bytes' if isinstance(raw, bytes) else 'chars'})"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def count_rollouts(items: Sequence[SAWItem]) -> int:
    """Distinct ``meta["rollout_id"]`` values; an item without one counts as its own rollout."""
    ids = [item.meta.get("rollout_id") for item in items]
    missing = ids.count(None)
    distinct = set(ids)
    return len(distinct) - (None in distinct) + missing


def _to_tuple(items: Iterable[SAWItem]) -> tuple[SAWItem, ...]:
    return tuple(items)


def _check_items(_instance: Any, _attribute: Any, items: tuple[SAWItem, ...]) -> None:
    if not items:
        raise DataError("BatchMessage.items must not be empty")
    # The usual message passes with one pass over the items and a few in C; the loop below, which
    # names the first defect, runs only when these fail (it also accepts int subclasses).
    if all(issubclass(kind, SAWItem) for kind in set(map(type, items))):
        versions: list[Any] = [item.meta.get("policy_version") for item in items]
        if set(map(type, versions)) == {int} and min(versions) >= 0:
            return
    for i, item in enumerate(items):
        if not isinstance(item, SAWItem):
            raise DataError(f"BatchMessage.items[{i}] must be a SAWItem, got {type(item).__name__}")
        version = item.meta.get("policy_version")
        # every pipeline item needs a version for staleness control
        rollout = item.meta.get("rollout_id")
        check_int(
            f"BatchMessage.items[{i}] (rollout {rollout!r}) policy_version", version, 0, error=DataError
        )


@attrs.frozen
class BatchMessage:
    """One actor batch on the queue (see the module docstring for the layout)."""

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
        check_number("BatchMessage.created_at", self.created_at, error=DataError)
        if not isinstance(self.meta, dict):
            raise DataError(f"BatchMessage.meta must be a dict, got {type(self.meta).__name__}")

    @functools.cached_property  # read by the header, the checks of a decoded message and the stats
    def policy_version(self) -> int:
        """The oldest version among the items: what staleness control must assume for the batch."""
        return min(int(item.meta["policy_version"]) for item in self.items)

    @functools.cached_property
    def num_rollouts(self) -> int:
        return count_rollouts(self.items)


def _positive_int(_instance: Any, attribute: Any, value: object) -> None:
    check_int(f"WireLimits.{attribute.name}", value, 1, error=DataError)


@attrs.frozen
class WireLimits:
    """Size bounds both ends of the queue enforce: an actor refuses to push what a learner would
    refuse, and a learner dead-letters a message over them (a runaway actor must not exhaust its
    memory)."""

    max_message_bytes: int = attrs.field(default=256 * 2**20, validator=_positive_int)
    """One message, as bytes on the queue (Redis itself stops at 512 MiB)."""
    max_meta_bytes: int = attrs.field(default=2**20, validator=_positive_int)
    """The batch meta, packed: counters and averages take a few kB."""


DEFAULT_WIRE_LIMITS = WireLimits()


def _check_size(what: str, size: int, limit: int, setting: str) -> None:
    if size > limit:
        raise DataError(f"{what} is {size} bytes, over WireLimits.{setting}={limit}")


def _msgpack() -> ModuleType:
    try:
        import msgpack  # type: ignore[import-untyped]  # ships no type information
    except ImportError as exc:
        raise missing_extra("ludic-core", "redis", "msgpack") from exc
    return msgpack


@attrs.frozen
class EncodedMessage:
    """A message's msgpack bytes in parts (views of its columns among them), to be written as they
    are: ``b"".join(parts)`` is :func:`encode_message`'s result."""

    parts: list[Buffer]
    size: int


def encode_message(message: BatchMessage, limits: WireLimits = DEFAULT_WIRE_LIMITS) -> bytes:
    """The msgpack bytes of ``message``; raises :class:`DataError` naming the item, field and value of
    anything a reader would refuse (so an actor never pushes a message the learner dead-letters)."""
    return b"".join(encode_parts(message, limits).parts)


def encode_parts(message: BatchMessage, limits: WireLimits = DEFAULT_WIRE_LIMITS) -> EncodedMessage:
    """:func:`encode_message`'s bytes in parts, not joined: an actor writes them to Redis as they are.

    Each value is packed once: the batch meta's and the item metas' bytes that the checks measure and
    search go into the message as they are, and no column is copied on the way."""
    meta = _checked_meta(message.meta, limits)
    try:
        items = pack_items(message.items)
        header = {
            "format": WIRE_FORMAT,
            "wire_version": WIRE_VERSION,
            "actor_id": message.actor_id,
            "batch_index": message.batch_index,
            "created_at": message.created_at,
            "policy_version": message.policy_version,
            "num_rollouts": message.num_rollouts,
        }
        packed = {"meta": (packb(message.meta) if meta is None else meta,), "items": tuple(items)}
        parts = map_parts(header, packed)
    except Unpackable as exc:
        raise DataError(
            f"batch {message.batch_index} of actor {message.actor_id!r} cannot be packed (item or batch "
            f"meta holds a value msgpack cannot carry: only maps, lists, str, bytes, numbers, bools, "
            f"None): {exc}"
        ) from exc.__cause__
    size = sum(map(len, parts))
    _check_size(
        f"batch {message.batch_index} of actor {message.actor_id!r}",
        size,
        limits.max_message_bytes,
        "max_message_bytes",
    )
    return EncodedMessage(parts=parts, size=size)


def _checked_meta(meta: dict[str, Any], limits: WireLimits) -> bytes | None:
    """The batch meta's msgpack bytes, checked finite and within ``max_meta_bytes`` (``None``: msgpack
    cannot pack it, which the whole message's packing names)."""
    packed = packed_or_none(meta)
    check_finite_meta(meta, "batch meta", packed)
    if packed is not None:
        _check_size("the batch meta", len(packed), limits.max_meta_bytes, "max_meta_bytes")
    return packed


def _json_wire_version(raw: bytes) -> object:
    """The ``wire_version`` of a version-1 (JSON) message, else ``None``: only to say why it is refused."""
    if not raw.startswith(b"{"):
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("format") == WIRE_FORMAT:
        return data.get("wire_version")
    return None


def _header(data: dict[str, Any], key: str) -> Any:
    if key not in data:
        raise DataError(f"header {key!r} is missing")
    return data[key]


def _from_map(data: dict[str, Any], limits: WireLimits) -> BatchMessage:
    if data.get("format") != WIRE_FORMAT:
        raise DataError(
            f"not a Ludic pipeline message: format is {data.get('format')!r}, expected {WIRE_FORMAT!r}"
        )
    version = data.get("wire_version")
    if version != WIRE_VERSION:
        raise DataError(
            f"pipeline wire_version {version!r} is not supported (this reader speaks {WIRE_VERSION}); "
            "actors and learners must run the same Ludic version"
        )
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise DataError(f"the batch meta must be a map, got {type(meta).__name__}")
    _checked_meta(meta, limits)
    message = BatchMessage(
        items=tuple(unpack_items(_header(data, "items"))),
        actor_id=_header(data, "actor_id"),
        batch_index=_header(data, "batch_index"),
        created_at=_header(data, "created_at"),
        meta=meta,
    )
    # The header repeats two derived values for readers that skip the items (dumps, dashboards); a
    # mismatch means the message was edited or produced by a broken writer.
    for key, derived in (
        ("policy_version", message.policy_version),
        ("num_rollouts", message.num_rollouts),
    ):
        if data.get(key) != derived:
            raise DataError(f"header {key}={data.get(key)!r} disagrees with the items ({derived})")
    return message


def decode_message(raw: bytes, limits: WireLimits = DEFAULT_WIRE_LIMITS) -> BatchMessage:
    """Parse and check one message; any defect raises :class:`DataError` quoting the message start."""
    msgpack = _msgpack()
    if not isinstance(raw, bytes):
        raise DataError(f"a pipeline message is bytes, got {type(raw).__name__}: {excerpt(raw)}")
    try:
        _check_size("the message", len(raw), limits.max_message_bytes, "max_message_bytes")
    except DataError as exc:
        raise DataError(f"invalid pipeline message: {exc}; message starts {excerpt(raw)}") from exc
    try:
        # strict_map_key=False: item meta may hold int keys (env infos do), which msgpack keeps as ints.
        data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        legacy = _json_wire_version(raw)
        if legacy is not None:
            raise DataError(
                f"pipeline wire_version {legacy!r} (JSON) is not supported (this reader speaks "
                f"{WIRE_VERSION}, msgpack): the actor runs an older Ludic than the learner; "
                f"message starts {excerpt(raw)}"
            ) from exc
        raise DataError(f"pipeline message is not valid msgpack ({exc}): {excerpt(raw)}") from exc
    if not isinstance(data, dict):
        raise DataError(f"pipeline message must be a msgpack map, got {type(data).__name__}: {excerpt(raw)}")
    try:
        return _from_map(data, limits)
    except DataError as exc:
        raise DataError(f"invalid pipeline message: {exc}; message starts {excerpt(raw)}") from exc
