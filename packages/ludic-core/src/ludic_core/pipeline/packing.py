"""msgpack maps assembled from parts packed once, for the pipeline's messages.

A message's checks pack some of its values anyway (a meta is searched for NaN in its msgpack bytes and
measured against its size limit), and its binary columns are large: :func:`map_parts` takes such
values as msgpack bytes already made, packs the others, and returns the map's parts for one
``b"".join``, which copies each column once (``msgpack.packb`` would copy it into its buffer and out
again). The bytes are a msgpack map any reader decodes as ``msgpack.packb``'s of the same entries.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from ludic_core.errors import missing_extra

try:
    import msgpack  # type: ignore[import-untyped]  # ships no type information
except ImportError as exc:  # pragma: no cover - the redis extra installs it
    raise missing_extra("ludic-core", "redis", "msgpack") from exc

__all__ = ["Buffer", "Unpackable", "bin_parts", "map_parts", "packb", "packed_or_none"]

Buffer = bytes | memoryview
"""A part of a message: bytes, or a view of bytes (one byte per item, so ``len`` counts bytes)."""


class Unpackable(Exception):
    """msgpack cannot pack a value; its error (``TypeError``, ``ValueError`` or ``OverflowError``,
    naming the value) is the cause and the message."""


def packb(value: Any) -> bytes:
    """``value`` as msgpack (``str`` as str, ``bytes`` as bin); raises :class:`Unpackable` for a
    value msgpack cannot pack."""
    try:
        return bytes(msgpack.packb(value, use_bin_type=True))
    except (TypeError, ValueError, OverflowError) as exc:
        raise Unpackable(str(exc)) from exc


def packed_or_none(value: Any) -> bytes | None:
    """``value`` packed with msgpack, or ``None`` when msgpack cannot pack it."""
    try:
        return packb(value)
    except Unpackable:
        return None


def bin_parts(data: Buffer) -> tuple[Buffer, ...]:
    """``data`` as a msgpack ``bin``, in parts: the header msgpack picks for its size, then the bytes
    (not copied)."""
    size = memoryview(data).nbytes
    if size < 2**8:
        header = struct.pack(">BB", 0xC4, size)
    elif size < 2**16:
        header = struct.pack(">BH", 0xC5, size)
    else:
        header = struct.pack(">BI", 0xC6, size)
    return header, data


def _map_header(count: int) -> bytes:
    if count < 2**4:
        return struct.pack(">B", 0x80 | count)
    if count < 2**16:
        return struct.pack(">BH", 0xDE, count)
    return struct.pack(">BI", 0xDF, count)


@functools.cache
def _packed_key(key: str) -> bytes:
    return packb(key)


def map_parts(plain: dict[str, Any], packed: dict[str, tuple[Buffer, ...]]) -> list[Buffer]:
    """The parts of one msgpack map: ``plain``'s entries, packed here by one ``msgpack.packb``, then
    ``packed``'s, whose values are given as their msgpack bytes (in parts)."""
    body = packb(plain)  # a map of its own: its entries follow its header
    parts: list[Buffer] = [
        _map_header(len(plain) + len(packed)),
        memoryview(body)[len(_map_header(len(plain))) :],
    ]
    for key, value in packed.items():
        parts.append(_packed_key(key))
        parts.extend(value)
    return parts
