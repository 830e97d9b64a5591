"""SAW items as packed binary columns: the ``items`` of a pipeline message (wire version 3).

A batch's items travel as **one** map of columns (``schema_version``, ``lengths``, ``token_bytes``,
``input_ids``, ``action_runs``, ``weights``, ``actor_logps`` / ``teacher_logps`` with their
``*_present`` flags, ``sampling_temperatures``, ``metas``), so each array is packed and checked once per
message. Token ids take the narrowest unsigned little-endian width (1, 2 or 4 bytes) that holds the
message's largest id; action masks are run lengths (0s, 1s, 0s, …); logprobs are float32, as the trainer
collates them; weights stay float64. :func:`pack_items` and :func:`unpack_items` run the same checks
(consistent lengths and run sums, exact buffer sizes, logprobs finite and <= ``LOGP_TOLERANCE``, finite
weights, temperatures ``None`` or finite >= 0, metas free of NaN/inf) as whole-column passes in C or
numpy, naming the item, field and value on failure, so an actor never pushes what a learner refuses.
Each check runs once per column and direction: the metas' msgpack bytes that the NaN check searches
are the bytes the message carries, and a logprob column is checked once, as the float32 values on the
wire. Unpacked items are :class:`~ludic_core.packed_saw.PackedSAWItem` s.
"""

from __future__ import annotations

import math
import re
import struct
from array import array
from collections.abc import Sequence
from itertools import chain, compress
from operator import attrgetter, itemgetter
from typing import Any

import attrs

from ludic_core.errors import DataError, missing_extra
from ludic_core.packed_saw import UINT32, PackedArrays, PackedSAWItem, packed_arrays
from ludic_core.pipeline.packing import Buffer, bin_parts, map_parts, packb, packed_or_none
from ludic_core.saw import LOGP_TOLERANCE, SAW_SCHEMA_VERSION, SAWItem
from ludic_core.validation import check_number

try:
    import numpy as np
except ImportError as exc:  # pragma: no cover - the redis extra installs it
    raise missing_extra("ludic-core", "redis", exc.name or "numpy") from exc

__all__ = ["check_finite_meta", "pack_items", "unpack_items"]

# Token id width in bytes -> struct code (and numpy dtype) of a little-endian unsigned int that wide.
_ID_CODES = {1: "B", 2: "H", 4: "I"}
_ID_DTYPES = {width: np.dtype(f"<u{width}") for width in (1, 2, 4)}

# Every SAWItem field, in order: the wire carries exactly these. A new field must be added to the wire
# (or it would be dropped on the way to the learner), so a mismatch fails at import, loudly.
_ITEM_FIELDS = (
    "input_ids",
    "action_mask",
    "weight",
    "meta",
    "actor_logps",
    "teacher_logps",
    "sampling_temperature",
)
if tuple(field.name for field in attrs.fields(SAWItem)) != _ITEM_FIELDS:
    raise ImportError(
        f"ludic_core.pipeline.columns packs the SAWItem fields {_ITEM_FIELDS}, but SAWItem now has "
        f"{tuple(f.name for f in attrs.fields(SAWItem))}; update the wire format (and bump WIRE_VERSION)"
    )

_LOGP_FIELDS = ("actor_logps", "teacher_logps")

# The largest finite float32. A float64 logprob in [-_FLOAT32_MAX, LOGP_TOLERANCE] rounds to a finite
# float32 <= LOGP_TOLERANCE: rounding keeps order, and the tolerance itself rounds down.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
if float(np.float32(LOGP_TOLERANCE)) > LOGP_TOLERANCE:  # pragma: no cover - holds for 1e-4
    raise ImportError(
        f"LOGP_TOLERANCE={LOGP_TOLERANCE} rounds up in float32; the wire's logprob check assumes not"
    )

# The action runs of a mask's runs (0s, 1s, 0s, ...): every second one.
_ACTION_RUNS = itemgetter(slice(1, None, 2))
_IDS, _IDS_OFFSET, _LENGTH = attrgetter("ids"), attrgetter("ids_offset"), attrgetter("length")


# A part of a column: raw bytes (or any buffer) and the struct format of their values, which numpy
# reads as a dtype.
_Part = tuple["bytes | memoryview | array[Any]", str]


@attrs.frozen
class LogpColumn:
    """One logprob field of every item: float32 values of the items that have it, concatenated."""

    values: bytes
    present: list[bool]
    source: list[_Part] | None = attrs.field(default=None, eq=False)
    """The float64 values ``values`` were rounded from (an actor's column), to name a value beyond
    float32's range; ``None`` for a column read from the wire or packed as float32 already."""
    checked: bool = False
    """Whether ``values`` are known finite and <= ``LOGP_TOLERANCE`` (checked before rounding)."""


@attrs.frozen
class ItemColumns:
    """The columns of a message's items (see the module docstring), before or after msgpack."""

    lengths: list[int]
    token_bytes: int
    input_ids: bytes
    action_runs: list[list[int]]
    weights: list[float]
    logps: dict[str, LogpColumn]
    temperatures: list[float | None]
    metas: list[dict[str, Any]]


# --- items -> columns ------------------------------------------------------------------------------


def _label(index: int, meta: object) -> str:
    rollout = meta.get("rollout_id") if isinstance(meta, dict) else None
    return f"items[{index}]" + (f" (rollout {rollout!r})" if rollout is not None else "")


def _mask_runs(mask: Sequence[int], field: str) -> list[int]:
    """Run lengths of a 0/1 mask, starting with a run of 0s; ``bytearray`` and ``find`` scan in C."""
    try:
        raw = bytearray(mask)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{field} must hold only 0/1 ints: {exc}") from exc
    if raw.translate(None, b"\x00\x01"):
        position, value = next((i, v) for i, v in enumerate(raw) if v > 1)
        raise DataError(f"{field} must hold only 0/1; got {value} at position {position}")
    runs: list[int] = []
    position, wanted = 0, 1
    while position < len(raw):
        change = raw.find(wanted, position)
        if change < 0:
            change = len(raw)
        runs.append(change - position)
        position = change
        wanted ^= 1
    return runs


def _joined(parts: list[_Part]) -> np.ndarray[Any, Any]:
    """The values of ``parts`` as one array: one join of their bytes when they share a format (items
    of one builder or one message), else one conversion each (numpy widens to the widest)."""
    if len(parts) == 1:
        return np.frombuffer(parts[0][0], dtype=parts[0][1])
    formats = {fmt for _, fmt in parts}
    if len(formats) == 1:
        return np.frombuffer(b"".join([raw for raw, _ in parts]), dtype=formats.pop())
    return np.concatenate([np.frombuffer(raw, dtype=fmt) for raw, fmt in parts])


def _ids_of(index: int, item: SAWItem, packed: PackedArrays | None) -> _Part:
    """The item's ids: its packed buffer, if it has one, else converted by ``array``, which refuses
    negative, too large and non-int values in C."""
    if packed is not None:
        return packed.id_bytes(), packed.id_format
    try:
        return array(UINT32, item.input_ids), "=I"
    except (OverflowError, TypeError):
        bad = next(v for v in item.input_ids if not isinstance(v, int) or not 0 <= v < 2**32)
        raise DataError(
            f"{_label(index, item.meta)}: input_ids holds {bad!r}; token ids are ints in [0, 2**32)"
        ) from None


def _whole_buffers(buffers: list[bytes], offsets: list[int], size: int) -> bool:
    """Whether each buffer holds one item's values and nothing else, as the SAW builder packs them:
    every offset is 0 and, since each buffer holds at least its item's values, together they hold
    ``size`` bytes, the items' values and no more."""
    return not any(offsets) and sum(map(len, buffers)) == size


def _built_ids(built: list[PackedArrays]) -> np.ndarray[Any, Any] | None:
    """The ids of items packed at build time in one format, joined; ``None`` for other formats."""
    formats = {arrays.id_format for arrays in built}
    if len(formats) != 1:
        return None
    fmt = formats.pop()
    buffers = list(map(_IDS, built))
    size = sum(map(_LENGTH, built)) * struct.calcsize(fmt)
    if not _whole_buffers(buffers, list(map(_IDS_OFFSET, built)), size):
        buffers = [arrays.id_bytes() for arrays in built]  # views of a message's column
    return np.frombuffer(b"".join(buffers), dtype=fmt)


def _pack_ids(
    items: Sequence[SAWItem], packed: list[PackedArrays | None], built: list[PackedArrays] | None
) -> tuple[int, bytes]:
    """``(width, bytes)``: every item's ids in the narrowest width that holds the largest; numpy
    finds the largest and narrows the whole column in one call each."""
    ids = None if built is None else _built_ids(built)
    if ids is None:
        ids = _joined([_ids_of(index, item, packed[index]) for index, item in enumerate(items)])
    largest = int(ids.max())
    width = next(w for w, limit in ((1, 2**8), (2, 2**16), (4, 2**32)) if largest < limit)
    joined: object = ids.base
    if ids.dtype == _ID_DTYPES[width] and isinstance(joined, bytes):
        return width, joined  # already that width (a 4-byte vocabulary): these bytes, not a second copy
    return width, ids.astype(_ID_DTYPES[width]).tobytes()


def _tuple_logps(index: int, item: SAWItem, field: str, values: Sequence[float]) -> bytes:
    try:
        return struct.pack(f"<{len(values)}f", *values)
    except (struct.error, OverflowError, TypeError) as exc:
        raise DataError(
            f"{_label(index, item.meta)}: {field} cannot be packed as float32 ({exc}); logprobs are "
            "finite numbers <= 0"
        ) from exc


def _to_float32(parts: list[_Part], present: list[bool]) -> LogpColumn:
    """The float32 column of every item's logprobs, rounded as ``struct`` rounds one value (to
    nearest). Values from float64 are checked before they are rounded (two reductions): within
    ``[-FLOAT32_MAX, LOGP_TOLERANCE]``, every rounded value is finite and <= ``LOGP_TOLERANCE``
    (rounding keeps their order, and the tolerance rounds to no more than itself), and the column is
    not checked again; else a finite value beyond float32's range becomes an infinity here, which the
    column's check names from the values of ``parts``."""
    if not parts:
        return LogpColumn(values=b"", present=present)
    if {fmt for _, fmt in parts} == {"<f"}:  # float32 already: joined as they are, checked as read
        return LogpColumn(values=b"".join([raw for raw, _ in parts]), present=present)
    values = _joined(parts)
    if not values.size:
        return LogpColumn(values=b"", present=present)
    if float(values.max()) <= LOGP_TOLERANCE and float(values.min()) >= -_FLOAT32_MAX:
        return LogpColumn(values=values.astype("<f4").tobytes(), present=present, checked=True)
    with np.errstate(over="ignore"):
        rounded = values.astype("<f4")
    return LogpColumn(values=rounded.tobytes(), present=present, source=parts)


def _built_logps(built: list[PackedArrays], field: str, spans: list[tuple[bytes, int, int]]) -> list[_Part]:
    """The parts of the ``field`` column of items packed at build time that have it (``spans``: its
    ``(buffer, offset, count)`` in each): one join of each item's buffer when each holds only its
    values, else views."""
    formats = {arrays.logp_format for arrays in built}
    if len(formats) == 1:
        fmt = formats.pop()
        buffers = [span[0] for span in spans]
        size = sum(span[2] for span in spans) * struct.calcsize(fmt)
        if _whole_buffers(buffers, [span[1] for span in spans], size):
            return [(b"".join(buffers), fmt)]
    return [(arrays.logp_bytes(field), arrays.logp_format) for arrays in built]


def _pack_logps(
    items: Sequence[SAWItem],
    packed: list[PackedArrays | None],
    built: list[PackedArrays] | None,
    field: str,
    tuple_counts: dict[int, int],
) -> LogpColumn:
    """One logprob column. ``built``: every item's packed arrays when all have them (their logprobs
    were matched with their runs when they were built); ``tuple_counts``: the action tokens of each item
    without them, whose logprobs are matched here."""
    if built is not None:  # a few passes over the items, in C
        present = [field in arrays.logps for arrays in built]
        have = list(compress(built, present))
        return _to_float32(_built_logps(have, field, [arrays.logps[field] for arrays in have]), present)
    parts: list[_Part] = []
    present = []
    for index, item in enumerate(items):
        arrays = packed[index]
        if arrays is not None:
            present.append(field in arrays.logps)
            if present[-1]:
                parts.append((arrays.logp_bytes(field), arrays.logp_format))
            continue
        values = getattr(item, field)
        present.append(values is not None)
        if values is None:
            continue
        if len(values) != tuple_counts[index]:
            raise DataError(
                f"{_label(index, item.meta)}: {field} has {len(values)} entries but action_mask has "
                f"{tuple_counts[index]} ones"
            )
        parts.append((_tuple_logps(index, item, field, values), "<f"))
    return _to_float32(parts, present)


def _columns_from_items(items: Sequence[SAWItem]) -> ItemColumns:
    packed = list(map(packed_arrays, items))
    every = [arrays for arrays in packed if arrays is not None]
    built = every if len(every) == len(packed) else None
    tuple_counts: dict[int, int] = {}  # the action tokens of the items without packed arrays
    if built is not None:  # packed at build time: lengths and runs without a scan
        lengths = [arrays.length for arrays in built]
        action_runs = [arrays.mask_runs for arrays in built]
    else:
        lengths, action_runs = [], []
        for index, item in enumerate(items):
            arrays = packed[index]
            if arrays is not None:
                lengths.append(arrays.length)
                action_runs.append(arrays.mask_runs)
                continue
            try:
                lengths.append(len(item.input_ids))
                if len(item.action_mask) != lengths[-1]:
                    raise DataError(
                        f"action_mask has length {len(item.action_mask)}, input_ids has {lengths[-1]}"
                    )
                action_runs.append(_mask_runs(item.action_mask, "action_mask"))
            except DataError as exc:
                raise DataError(f"{_label(index, item.meta)}: {exc}") from exc
            tuple_counts[index] = sum(action_runs[-1][1::2])
    token_bytes, input_ids = _pack_ids(items, packed, built)
    return ItemColumns(
        lengths=lengths,
        token_bytes=token_bytes,
        input_ids=input_ids,
        action_runs=action_runs,
        weights=[float(item.weight) for item in items],
        logps={field: _pack_logps(items, packed, built, field, tuple_counts) for field in _LOGP_FIELDS},
        temperatures=[item.sampling_temperature for item in items],
        metas=[item.meta for item in items],
    )


def _map_parts(columns: ItemColumns, metas: bytes) -> list[Buffer]:
    """The column map's msgpack parts, ``metas`` (the metas' msgpack bytes) among them."""
    actor, teacher = columns.logps["actor_logps"], columns.logps["teacher_logps"]
    plain = {
        "schema_version": SAW_SCHEMA_VERSION,
        "lengths": columns.lengths,
        "token_bytes": columns.token_bytes,
        "action_runs": columns.action_runs,
        "weights": columns.weights,
        "actor_logps_present": actor.present,
        "teacher_logps_present": teacher.present,
        "sampling_temperatures": columns.temperatures,
    }
    packed = {
        "input_ids": bin_parts(columns.input_ids),
        "actor_logps": bin_parts(actor.values),
        "teacher_logps": bin_parts(teacher.values),
        "metas": (metas,),
    }
    return map_parts(plain, packed)


# --- NaN/inf in metas ------------------------------------------------------------------------------

# Meta values that cannot hold a float: skipped by one set lookup (metas are checked on every push).
_NO_FLOATS = frozenset({str, int, bool, type(None), bytes})


def _non_finite_path(value: Any) -> str | None:
    """Where in ``value`` a NaN/inf sits (``"['step_info']['score']"``, ``""`` for ``value`` itself),
    or ``None``; the path is only formatted on the way out of a failure."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ""
    if isinstance(value, dict):
        entries: Any = value.items()
    elif isinstance(value, (list, tuple)):
        entries = enumerate(value)
    else:
        return None
    for key, inner in entries:
        kind = type(inner)
        if kind in _NO_FLOATS:
            continue
        if kind is float:  # most values that are not skipped: checked here, without a call
            if math.isfinite(inner):
                continue
            return f"[{key!r}]"
        path = _non_finite_path(inner)
        if path is not None:
            return f"[{key!r}]{path}"
    return None


# A float64 NaN or infinity as msgpack packs it: the float64 marker 0xcb, then a sign bit and an
# exponent of all ones. msgpack packs every Python float so (a float32 on the wire decodes to a float).
_PACKED_NON_FINITE = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")


def _maybe_non_finite(packed: bytes | None) -> bool:
    """Whether a NaN/inf may sit in the value of msgpack bytes ``packed`` (``None``: a value msgpack
    cannot pack): one search of the bytes, in C, instead of a walk over every value. ``True`` only says
    that :func:`_non_finite_path` must look: the pattern can also match inside other bytes (a bin value,
    an int's or a finite float's own bytes; never UTF-8 text), and a value msgpack cannot pack is left
    to the walk."""
    return packed is None or _PACKED_NON_FINITE.search(packed) is not None


def check_finite_meta(meta: Any, name: str, packed: bytes | None = None) -> None:
    """NaN/inf anywhere in a meta (``packed``: its msgpack bytes, if the caller has them; else it is
    packed here): refused, as the JSON wire refused them (averages would turn NaN)."""
    if packed is None:
        packed = packed_or_none(meta)
    if _maybe_non_finite(packed) and (path := _non_finite_path(meta)) is not None:
        raise DataError(f"{name}{path} is not finite")


def _check_finite_metas(metas: list[Any], packed: bytes | None) -> None:
    """``packed``: the msgpack bytes of ``metas`` (``None``: msgpack cannot pack them)."""
    if _maybe_non_finite(packed) and _non_finite_path(metas) is not None:  # then name the item
        for index, meta in enumerate(metas):
            check_finite_meta(meta, f"{_label(index, meta)}: meta")


# --- untrusted map -> columns (shapes and types) ---------------------------------------------------


def _is_int(value: object) -> bool:
    return type(value) is int  # msgpack gives plain ints; a bool is never a count


def _field(
    data: dict[str, Any], key: str, kind: type[list[Any]] | type[bytes], count: int | None = None
) -> Any:
    if key not in data:
        raise DataError(f"items column {key!r} is missing")
    value = data[key]
    if not isinstance(value, kind):
        raise DataError(f"items column {key!r} must be {kind.__name__}, got {type(value).__name__}")
    if count is not None and len(value) != count:
        raise DataError(f"items column {key!r} has {len(value)} entries for {count} items")
    return value


def _check_runs(runs: object, length: int, field: str) -> list[int]:
    if not isinstance(runs, list) or not all(_is_int(r) and r >= 0 for r in runs):
        raise DataError(f"{field} runs must be a list of run lengths (ints >= 0), got {runs!r:.80}")
    if sum(runs) != length:
        raise DataError(f"{field} runs cover {sum(runs)} tokens, input_ids has {length}")
    return runs


def _columns_from_map(data: object) -> ItemColumns:
    if not isinstance(data, dict):
        raise DataError(f"'items' must be a map of columns, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != SAW_SCHEMA_VERSION:
        raise DataError(
            f"SAWItem schema_version {version!r} is not supported (expected {SAW_SCHEMA_VERSION})"
        )
    lengths = _field(data, "lengths", list)
    if not set(map(type, lengths)) <= {int} or min(lengths, default=1) < 1:
        raise DataError(
            f"items column 'lengths' must hold ints >= 1 (input_ids is never empty), got {lengths!r:.80}"
        )
    count = len(lengths)
    token_bytes = data.get("token_bytes")
    if token_bytes not in _ID_CODES or not _is_int(token_bytes):
        raise DataError(f"items column 'token_bytes' must be 1, 2 or 4, got {token_bytes!r}")
    logps = {
        field: LogpColumn(
            values=_field(data, field, bytes), present=_field(data, f"{field}_present", list, count)
        )
        for field in _LOGP_FIELDS
    }
    return ItemColumns(
        lengths=lengths,
        token_bytes=token_bytes,
        input_ids=_field(data, "input_ids", bytes),
        action_runs=_field(data, "action_runs", list, count),
        weights=_field(data, "weights", list, count),
        logps=logps,
        temperatures=_field(data, "sampling_temperatures", list, count),
        metas=_field(data, "metas", list, count),
    )


# --- checks (both directions) ----------------------------------------------------------------------


def _first_bad_logp(columns: ItemColumns, field: str, counts: list[int], flat: int, value: float) -> str:
    """Name the item and position of the ``flat``-th value of a logprob column."""
    for index, (present, count) in enumerate(zip(columns.logps[field].present, counts, strict=True)):
        if not present:
            continue
        if flat < count:
            return f"{_label(index, columns.metas[index])}: {field}[{flat}] = {value!r}"
        flat -= count
    raise AssertionError("logprob index past the column")  # pragma: no cover: sizes were checked


def _check_logps(columns: ItemColumns, field: str, counts: list[int]) -> None:
    column = columns.logps[field]
    if not set(map(type, column.present)) <= {bool}:
        raise DataError(f"items column '{field}_present' must hold booleans, got {column.present!r:.80}")
    expected = sum(compress(counts, column.present))  # as many flags as counts: both have one per item
    if len(column.values) != 4 * expected:
        raise DataError(
            f"items column {field!r} holds {len(column.values)} bytes; the action tokens of the items "
            f"that have {field} need {4 * expected} (float32)"
        )
    if not expected or column.checked:
        return
    values = np.frombuffer(column.values, dtype="<f4")
    # Two reductions, no temporary array: a NaN makes both comparisons false, an infinity one of them.
    if float(values.max()) <= LOGP_TOLERANCE and float(values.min()) > -math.inf:
        return
    _refuse_logps(columns, field, counts, values)


def _refuse_logps(columns: ItemColumns, field: str, counts: list[int], values: np.ndarray[Any, Any]) -> None:
    """Name the first value of a logprob column that failed its check: one beyond float32's range
    (an actor's float64 logprob), else one not finite, else one above ``LOGP_TOLERANCE``."""
    parts = columns.logps[field].source
    if parts is not None:
        source = _joined(parts)
        overflow = np.isinf(values) & np.isfinite(source)
        if overflow.any():
            flat = int(np.argmax(overflow))
            where = _first_bad_logp(columns, field, counts, flat, float(source[flat]))
            raise DataError(
                f"{where} cannot be packed as float32 (beyond its range); logprobs are finite numbers <= 0"
            )
    finite = np.isfinite(values)
    if not finite.all():
        flat = int(np.argmin(finite))
        where = _first_bad_logp(columns, field, counts, flat, float(values[flat]))
        raise DataError(f"{where} is not finite")
    flat = int(np.argmax(values > LOGP_TOLERANCE))
    where = _first_bad_logp(columns, field, counts, flat, float(values[flat]))
    raise DataError(f"{where} is > 0 (a logprob is <= 0)")


def _check_number(value: object, field: str, *, minimum: float | None = None) -> None:
    check_number(field, value, minimum=minimum, error=DataError)


def _check_columns(columns: ItemColumns, packed_metas: bytes | None) -> list[int]:
    """Raise :class:`DataError` naming the item, field and value of the first defect; else the number
    of action tokens of each item. ``packed_metas``: the msgpack bytes of the metas (``None``: msgpack
    cannot pack them), searched for NaN/inf."""
    lengths = columns.lengths
    total = sum(lengths)
    if len(columns.input_ids) != total * columns.token_bytes:
        raise DataError(
            f"items column 'input_ids' holds {len(columns.input_ids)} bytes; {total} tokens of "
            f"{columns.token_bytes} bytes need {total * columns.token_bytes}"
        )
    action_counts = _held_action_counts(columns)
    if action_counts is None:
        action_counts = _check_each_item(columns)
    for field in _LOGP_FIELDS:
        _check_logps(columns, field, action_counts)
    _check_finite_metas(columns.metas, packed_metas)
    return action_counts


def _held_action_counts(columns: ItemColumns) -> list[int] | None:
    """The number of action tokens of each item when every item's meta, runs, weight and temperature
    pass :func:`_check_each_item`'s checks, found with a few passes in C over whole columns (a message's
    items are checked on both sides). ``None`` only says that :func:`_check_each_item` must look (it
    also accepts an int weight)."""
    runs = columns.action_runs
    if set(map(type, columns.metas)) != {dict} or set(map(type, runs)) != {list}:
        return None
    flat = list(chain.from_iterable(runs))
    # type() is int leaves out bools; sums compare with the lengths item by item.
    if not flat or set(map(type, flat)) != {int} or min(flat) < 0 or list(map(sum, runs)) != columns.lengths:
        return None
    # A sum of floats is finite only when every one is (a NaN or an inf makes it NaN or inf; an
    # overflow of finite values makes it inf too, and the item by item checks then pass them).
    weights = columns.weights
    if set(map(type, weights)) != {float} or not math.isfinite(sum(weights)):
        return None
    temperatures = [t for t in columns.temperatures if t is not None]
    if temperatures and (
        set(map(type, temperatures)) != {float}
        or not math.isfinite(sum(temperatures))
        or min(temperatures) < 0
    ):
        return None
    return list(map(sum, map(_ACTION_RUNS, runs)))


def _check_each_item(columns: ItemColumns) -> list[int]:
    action_counts: list[int] = []
    for index, length in enumerate(columns.lengths):
        meta = columns.metas[index]
        try:
            if not isinstance(meta, dict):
                raise DataError(f"meta must be a map, got {type(meta).__name__}")
            runs = _check_runs(columns.action_runs[index], length, "action_mask")
            action_counts.append(sum(runs[1::2]))
            _check_number(columns.weights[index], "weight")
            temperature = columns.temperatures[index]
            if temperature is not None:
                _check_number(temperature, "sampling_temperature", minimum=0.0)
        except DataError as exc:
            raise DataError(f"{_label(index, meta)}: {exc}") from exc
    return action_counts


# --- columns -> items ------------------------------------------------------------------------------


def _items_from_columns(columns: ItemColumns, action_counts: list[int]) -> list[SAWItem]:
    """Items that hold their arrays as slices of the checked columns (unpacked when first read)."""
    id_format = "<" + _ID_CODES[columns.token_bytes]
    actor, teacher = columns.logps["actor_logps"], columns.logps["teacher_logps"]
    actor_offset = teacher_offset = id_offset = 0
    items: list[SAWItem] = []
    for length, count, runs, weight, meta, temperature, has_actor, has_teacher in zip(
        columns.lengths,
        action_counts,
        columns.action_runs,
        columns.weights,
        columns.metas,
        columns.temperatures,
        actor.present,
        teacher.present,
        strict=True,
    ):
        logps: dict[str, tuple[bytes, int, int]] = {}
        if has_actor:
            logps["actor_logps"] = (actor.values, actor_offset, count)
            actor_offset += 4 * count
        if has_teacher:
            logps["teacher_logps"] = (teacher.values, teacher_offset, count)
            teacher_offset += 4 * count
        packed = PackedArrays(columns.input_ids, id_format, id_offset, length, runs, logps)
        id_offset += length * columns.token_bytes
        items.append(
            PackedSAWItem.from_checked(
                packed,
                weight=float(weight),  # a writer may send 1 for 1.0, as SAWItem allows
                meta=meta,
                sampling_temperature=None if temperature is None else float(temperature),
            )
        )
    return items


# --- the two directions ----------------------------------------------------------------------------


def pack_items(items: Sequence[SAWItem]) -> list[Buffer]:
    """The msgpack column map of ``items``, as parts to join into a message; raises
    :class:`DataError` naming the item, field and value of anything a reader would refuse, and
    :class:`~ludic_core.pipeline.packing.Unpackable` when a meta holds a value msgpack cannot pack."""
    columns = _columns_from_items(items)
    metas = packed_or_none(columns.metas)  # the bytes the NaN check searches go on the wire
    _check_columns(columns, metas)
    return _map_parts(columns, packb(columns.metas) if metas is None else metas)


def unpack_items(data: object) -> list[SAWItem]:
    """Check a column map (as msgpack decoded it) and build its items; :class:`DataError` names the
    item, field and value of the first defect."""
    columns = _columns_from_map(data)
    return _items_from_columns(columns, _check_columns(columns, packed_or_none(columns.metas)))
