"""SAW items that keep their token arrays packed in binary buffers until something reads them.

Whoever consumes an item reads each array once (a learner collating, an actor packing for the wire), so a
:class:`PackedSAWItem` holds its arrays packed and unpacks each into the usual tuple on first read,
saving a Python object per token. :meth:`PackedSAWItem.from_arrays` (the SAW builder) takes ``array``
token ids, run-length action masks and ``array("d")`` logprobs and checks lengths and counts only, as the
arrays' types guarantee the rest; :meth:`PackedSAWItem.from_checked`
(:func:`~ludic_core.pipeline.columns.unpack_items`) takes slices of checked message columns. A
:class:`PackedSAWItem` *is* a :class:`~ludic_core.saw.SAWItem`: fields read as the same tuples, it
compares equal to an equal ``SAWItem``, and ``attrs.evolve``, ``copy`` and ``pickle`` give an item holding
tuples. It is frozen, so its packed arrays always hold its fields' values.
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, overload

import attrs

from ludic_core.data_fields import is_strict_int
from ludic_core.errors import DataError
from ludic_core.saw import SAWItem

__all__ = ["UINT32", "PackedArrays", "PackedSAWItem", "packed_arrays", "with_meta"]

T = TypeVar("T")


def _uint32_code() -> str:
    for code in ("I", "L"):
        if array(code).itemsize == 4:
            return code
    raise ImportError("this platform's array module has no 4-byte unsigned int")  # pragma: no cover


UINT32 = _uint32_code()
"""The ``array`` type code of a 4-byte unsigned int (``"I"`` on every usual platform): the token id
arrays :meth:`PackedSAWItem.from_arrays` takes."""


def _what(value: object) -> str:
    if isinstance(value, array):
        return f"array({value.typecode!r}) of {len(value)}"
    return f"{type(value).__name__} {value!r:.60}"


def _canonical_runs(runs: Sequence[int], length: int) -> list[int]:
    """``runs`` (0s, 1s, 0s, ...) without empty runs but the first, as the wire writes a mask: a
    builder may give an empty completion or an empty prompt suffix."""
    kind = type(runs)
    # A tuple or a list (what builders pass) skips the ABC check, which costs more than the loop below.
    if (
        kind is not tuple
        and kind is not list
        and (isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence))
    ):
        raise DataError(f"PackedSAWItem.action_runs must be a sequence of run lengths, got {_what(runs)}")
    out: list[int] = []
    for position, run in enumerate(runs):
        if (type(run) is not int and not is_strict_int(run)) or run < 0:
            raise DataError(f"PackedSAWItem.action_runs[{position}] must be an int >= 0, got {run!r}")
        if run == 0:
            continue
        if len(out) & 1 != position & 1:  # the same value as the last run kept: extend it
            if out:
                out[-1] += run
                continue
            out.append(0)  # the mask starts with 1s
        out.append(run)
    if sum(out) != length:
        raise DataError(f"PackedSAWItem.action_runs cover {sum(out)} tokens, input_ids has {length}")
    return out


def _span(buffer: bytes, offset: int, size: int) -> bytes | memoryview:
    if offset == 0 and len(buffer) == size:
        return buffer
    return memoryview(buffer)[offset : offset + size]


@attrs.define  # not frozen: a message builds one per item, and nothing changes one after that
class PackedArrays:
    """Where one item's arrays sit in packed buffers (a message's checked columns, or the item's own).

    ``ids`` holds the item's token ids from byte ``ids_offset``: ``length`` unsigned ints of struct
    format ``id_format`` (byte order and code: ``"<I"`` little-endian 4 bytes as on the wire, ``"=I"``
    native as an ``array`` holds them); ``mask_runs`` its action mask as run lengths starting with 0s
    (no empty run but the first); ``logps`` maps each logprob field the item has to
    ``(buffer, offset, count)`` of floats of struct format ``logp_format`` (``"<f"``: the wire's
    float32, ``"=d"``: a builder's float64). Both formats are also numpy dtype strings.
    """

    ids: bytes
    id_format: str
    ids_offset: int
    length: int
    mask_runs: list[int]
    logps: dict[str, tuple[bytes, int, int]]
    logp_format: str = "<f"

    def id_bytes(self) -> bytes | memoryview:
        """The item's ids as raw bytes of ``id_format`` (the buffer itself when it holds only them)."""
        return _span(self.ids, self.ids_offset, self.length * struct.calcsize(self.id_format))

    def logp_bytes(self, field: str) -> bytes | memoryview:
        """The item's ``field`` logprobs as raw bytes of ``logp_format``."""
        buffer, offset, count = self.logps[field]
        return _span(buffer, offset, count * struct.calcsize(self.logp_format))

    def input_ids(self) -> tuple[int, ...]:
        order, code = self.id_format[0], self.id_format[1]
        return struct.unpack_from(f"{order}{self.length}{code}", self.ids, self.ids_offset)

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
        order, code = self.logp_format[0], self.logp_format[1]
        return struct.unpack_from(f"{order}{count}{code}", buffer, offset)


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
    module docstring). Build one with :meth:`from_arrays`, or with :meth:`from_checked` when every
    value was checked already."""

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
        # A learner builds 16 of these per message: the slots are filled through their descriptors,
        # a third of the cost of object.__setattr__ by name (frozen attrs refuses plain assignment).
        item = object.__new__(cls)
        _set_packed(item, packed)
        _set_weight(item, weight)
        _set_meta(item, meta)
        _set_temperature(item, sampling_temperature)
        logps = packed.logps
        if "actor_logps" not in logps:
            _set_actor_logps(item, None)
        if "teacher_logps" not in logps:
            _set_teacher_logps(item, None)
        return item

    @classmethod
    def from_arrays(
        cls,
        *,
        input_ids: array[int],
        action_runs: Sequence[int],
        weight: float,
        meta: dict[str, Any] | None = None,
        actor_logps: array[float] | None = None,
        teacher_logps: array[float] | None = None,
        sampling_temperature: float | None = None,
    ) -> PackedSAWItem:
        """An item of packed arrays, checked as ``SAWItem(...)`` checks its fields.

        Args:
            input_ids: an ``array(UINT32)`` (``"I"``) of token ids, not empty.
            action_runs: the action mask as run lengths of 0s, 1s, 0s, ... (the first may be 0: the
                mask starts with 1s; empty runs anywhere are dropped); they cover ``input_ids``.
            actor_logps / teacher_logps: ``None`` or an ``array("d")`` with one logprob per action
                token (float64: the values read back are exactly the floats the builder had).
            weight, meta, sampling_temperature: as ``SAWItem``'s (a finite weight; a temperature
                ``None`` or finite ``>= 0``).

        The arrays are copied: the caller may reuse them. Raises :class:`DataError` naming the field
        and the value of anything ``SAWItem`` would refuse, and of an argument that is not such an array.
        """
        if not isinstance(input_ids, array) or input_ids.typecode != UINT32:
            raise DataError(
                f"PackedSAWItem.input_ids must be an array({UINT32!r}) of token ids, got {_what(input_ids)}"
            )
        length = len(input_ids)
        if length == 0:
            raise DataError("SAWItem.input_ids must not be empty")
        runs = _canonical_runs(action_runs, length)
        actions = sum(runs[1::2])
        logps: dict[str, tuple[bytes, int, int]] = {}
        for field, values in (("actor_logps", actor_logps), ("teacher_logps", teacher_logps)):
            if values is None:
                continue
            if not isinstance(values, array) or values.typecode != "d":
                raise DataError(
                    f"PackedSAWItem.{field} must be None or an array('d') of logprobs, got {_what(values)}"
                )
            if len(values) != actions:
                raise DataError(
                    f"SAWItem.{field} has {len(values)} entries but action_mask has {actions} ones"
                )
            logps[field] = (values.tobytes(), 0, actions)
        # The conversions of SAWItem's converters, so that both constructors take the same values.
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise DataError(f"SAWItem.weight must be a finite number, got {weight!r}") from None
        if not math.isfinite(weight):
            raise DataError(f"SAWItem.weight must be finite, got {weight!r}")
        temperature = sampling_temperature
        if isinstance(temperature, int) and not isinstance(temperature, bool):
            temperature = float(temperature)
        if temperature is not None and (
            not isinstance(temperature, float) or not math.isfinite(temperature) or temperature < 0
        ):
            raise DataError(
                f"SAWItem.sampling_temperature must be None or a finite number >= 0, got {temperature!r}"
            )
        if meta is not None and not isinstance(meta, dict):
            raise DataError(f"SAWItem.meta must be a dict, got {_what(meta)}")
        packed = PackedArrays(
            ids=input_ids.tobytes(),
            id_format="=I",
            ids_offset=0,
            length=length,
            mask_runs=runs,
            logps=logps,
            logp_format="=d",
        )
        return cls.from_checked(
            packed,
            weight=weight,
            meta={} if meta is None else meta,
            sampling_temperature=temperature,
        )

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


# The __set__ of each slot from_checked fills (SAWItem's own slots, as _UnpackedOnRead writes them).
_set_packed = PackedSAWItem.__dict__["_packed"].__set__
_set_weight = SAWItem.__dict__["weight"].__set__
_set_meta = SAWItem.__dict__["meta"].__set__
_set_temperature = SAWItem.__dict__["sampling_temperature"].__set__
_set_actor_logps = SAWItem.__dict__["actor_logps"].__set__
_set_teacher_logps = SAWItem.__dict__["teacher_logps"].__set__


def packed_arrays(item: SAWItem) -> PackedArrays | None:
    """The packed arrays ``item``'s fields hold, or ``None`` (a tuple-built item, or one made by
    ``evolve``, ``copy`` or unpickling)."""
    return getattr(item, "_packed", None) if isinstance(item, PackedSAWItem) else None


def with_meta(item: SAWItem, meta: dict[str, Any]) -> SAWItem:
    """``attrs.evolve(item, meta=meta)``, keeping a packed item's arrays packed: they do not change, so
    they are neither unpacked nor checked again (``evolve`` reads and validates every field)."""
    packed = packed_arrays(item)
    if packed is None:
        return attrs.evolve(item, meta=meta)
    return PackedSAWItem.from_checked(
        packed, weight=item.weight, meta=meta, sampling_temperature=item.sampling_temperature
    )
