"""SAW items decoded from the wire that keep their token arrays packed until something reads them.

A learner batch of 16 items of 1k tokens holds 16k token ids, 16k mask entries and ~6k logprobs. As
tuples of Python ints and floats they cost one object per token to create and again to free, more than
Redis needs to move the token's bytes; and a learner that trains on them reads each array once, when it
collates. So :func:`~ludic_core.pipeline.columns.unpack_items` checks every column of a message with
vectorised checks (sizes, run lengths, finite logprobs, see :mod:`ludic_core.pipeline.columns`) and
then builds :class:`PackedSAWItem` s, which hold their arrays as slices of the checked buffers and
unpack each into the usual tuple on its first read (then keep the tuple).

A :class:`PackedSAWItem` *is* a :class:`~ludic_core.saw.SAWItem`: every field reads as the same
tuples, ints and floats; it compares equal to a ``SAWItem`` with equal fields; ``attrs.evolve``,
``copy`` and ``pickle`` work (they set every field, as ``SAWItem.__init__`` does).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

import attrs

from ludic_core.saw import SAWItem

__all__ = ["PackedArrays", "PackedSAWItem"]

T = TypeVar("T")


@attrs.define  # not frozen: a message builds one per item, and nothing changes one after that
class PackedArrays:
    """Where one item's arrays sit in its message's checked columns.

    ``ids`` holds the item's token ids from byte ``ids_offset`` (``length`` unsigned little-endian ints
    of struct code ``id_code``); ``mask_runs`` its action mask as run lengths starting with 0s;
    ``logps`` maps each logprob field the item has to ``(buffer, offset, count)`` of float32 values.
    """

    ids: bytes
    id_code: str
    ids_offset: int
    length: int
    mask_runs: list[int]
    logps: dict[str, tuple[bytes, int, int]]

    def input_ids(self) -> tuple[int, ...]:
        return struct.unpack_from(f"<{self.length}{self.id_code}", self.ids, self.ids_offset)

    def action_mask(self) -> tuple[int, ...]:
        if len(self.mask_runs) <= 3:  # prompt, completion (and a tail): concatenating spans is quickest
            mask: tuple[int, ...] = ()
            for position, run in enumerate(self.mask_runs):
                mask += (position & 1,) * run
            return mask
        values: list[int] = []  # many spans: a list avoids copying the tuple once per span
        for position, run in enumerate(self.mask_runs):
            values += (position & 1,) * run
        return tuple(values)

    def logprobs(self, field: str) -> tuple[float, ...]:
        buffer, offset, count = self.logps[field]
        return struct.unpack_from(f"<{count}f", buffer, offset)


class _UnpackedOnRead(Generic[T]):
    """A ``SAWItem`` field of :class:`PackedSAWItem`: unpacked from ``_packed`` on the first read and
    kept in ``SAWItem``'s own slot; a write (``SAWItem.__init__`` under ``attrs.evolve``, ``copy``,
    unpickling) fills the slot, so the packed arrays are never read for that field."""

    def __init__(self, name: str, unpack: Callable[[PackedArrays], T]) -> None:
        self.slot = SAWItem.__dict__[name]  # the member descriptor of SAWItem's __slots__ entry
        self.unpack = unpack

    @overload
    def __get__(self, item: None, owner: type[Any]) -> _UnpackedOnRead[T]: ...

    @overload
    def __get__(self, item: PackedSAWItem, owner: type[Any]) -> T: ...

    def __get__(self, item: PackedSAWItem | None, owner: type[Any]) -> T | _UnpackedOnRead[T]:
        if item is None:
            return self
        try:
            value: T = self.slot.__get__(item, owner)
        except AttributeError:  # not read yet
            value = self.unpack(item._packed)
            self.slot.__set__(item, value)
        return value

    def __set__(self, item: PackedSAWItem, value: T) -> None:
        self.slot.__set__(item, value)


class PackedSAWItem(SAWItem):
    """A :class:`~ludic_core.saw.SAWItem` whose token arrays are unpacked when first read (see the
    module docstring). Build one with :meth:`from_checked` only: it trusts its arguments."""

    __slots__ = ("_packed",)

    input_ids = _UnpackedOnRead("input_ids", PackedArrays.input_ids)
    action_mask = _UnpackedOnRead("action_mask", PackedArrays.action_mask)
    actor_logps = _UnpackedOnRead[tuple[float, ...] | None](
        "actor_logps", lambda packed: packed.logprobs("actor_logps")
    )
    teacher_logps = _UnpackedOnRead[tuple[float, ...] | None](
        "teacher_logps", lambda packed: packed.logprobs("teacher_logps")
    )

    _packed: PackedArrays

    @classmethod
    def from_checked(
        cls,
        packed: PackedArrays,
        *,
        weight: float,
        meta: dict[str, Any],
        sampling_temperature: float | None,
    ) -> PackedSAWItem:
        """An item of arrays and values that :mod:`ludic_core.pipeline.columns` has checked as
        ``SAWItem``'s validators would (they are not run again: that is the point)."""
        item = object.__new__(cls)
        object.__setattr__(item, "_packed", packed)
        object.__setattr__(item, "weight", weight)
        object.__setattr__(item, "meta", meta)
        object.__setattr__(item, "sampling_temperature", sampling_temperature)
        for field in ("actor_logps", "teacher_logps"):
            if field not in packed.logps:
                object.__setattr__(item, field, None)
        return item

    def __len__(self) -> int:
        return self._packed.length if hasattr(self, "_packed") else super().__len__()

    @property
    def num_action_tokens(self) -> int:
        if hasattr(self, "_packed"):
            return sum(self._packed.mask_runs[1::2])
        return super().num_action_tokens

    def __eq__(self, other: object) -> bool:
        # attrs' SAWItem.__eq__ compares only instances of one class; a decoded item equals the item
        # that was sent.
        if not isinstance(other, SAWItem):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in attrs.fields(SAWItem))

    __hash__ = SAWItem.__hash__
