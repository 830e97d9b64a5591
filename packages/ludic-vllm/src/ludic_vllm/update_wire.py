"""The wire protocol shared by the server routes, the worker extension and the publishers.

Everything here is plain Python (no torch, no vLLM) so that both ends, and the unit tests, agree on one
definition of a manifest, of how tensors are grouped into flat broadcast buckets, and of the HTTP names.

A broadcast update is: the trainer POSTs a :class:`Manifest` (names, dtypes, shapes, in send order) to
``/ludic/update``; the workers then receive one flat buffer per :class:`Bucket` (consecutive entries of one
dtype, up to ``bucket_bytes``), split it, and stream the tensors into vLLM's reload path. Both sides
compute the buckets with :func:`plan_buckets` from the same manifest and ``bucket_bytes``, so no
per-bucket metadata travels.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ludic_core.errors import DataError
from ludic_core.validation import check_int

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "DTYPE_SIZES",
    "HEADER_POLICY_VERSION",
    "HEADER_POLICY_VERSION_START",
    "PAUSE_MODES",
    "ROUTE_PREFIX",
    "TRANSPORTS",
    "Bucket",
    "Manifest",
    "TensorSpec",
    "plan_buckets",
]

ROUTE_PREFIX = "/ludic/"
HEADER_POLICY_VERSION_START = "x-ludic-policy-version-start"
"""The policy version the server held when the request arrived (added to ``/v1/*`` responses)."""
HEADER_POLICY_VERSION = "x-ludic-policy-version"
"""The policy version the server held when the response started (added to ``/v1/*`` responses)."""

TRANSPORTS: frozenset[str] = frozenset({"gloo", "nccl"})
PAUSE_MODES: frozenset[str] = frozenset({"keep", "abort", "wait"})
DEFAULT_BUCKET_BYTES = 256 * 2**20

DTYPE_SIZES: Mapping[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
"""Element sizes of the dtypes a manifest may carry, by their ``torch`` attribute names."""


def _check_name(_i: Any, _a: Any, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise DataError(f"TensorSpec.name must be a non-empty str, got {value!r}")


def _check_dtype(_i: Any, _a: Any, value: str) -> None:
    if value not in DTYPE_SIZES:
        raise DataError(f"TensorSpec.dtype must be one of {sorted(DTYPE_SIZES)}, got {value!r}")


def _shape(values: Iterable[int]) -> tuple[int, ...]:
    out = tuple(values)
    for dim in out:
        check_int(f"TensorSpec.shape {list(out)!r}: each dim", dim, 0, error=DataError)
    return out


@attrs.frozen
class TensorSpec:
    """One tensor of an update: its checkpoint-format name, dtype name (``"bfloat16"``) and shape."""

    name: str = attrs.field(validator=_check_name)
    dtype: str = attrs.field(validator=_check_dtype)
    shape: tuple[int, ...] = attrs.field(converter=_shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_SIZES[self.dtype]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorSpec:
        missing = [k for k in ("name", "dtype", "shape") if k not in data]
        if missing:
            raise DataError(f"manifest entry is missing {missing}; got {dict(data)!r}")
        return cls(name=data["name"], dtype=data["dtype"], shape=data["shape"])


def _entries(values: Iterable[TensorSpec]) -> tuple[TensorSpec, ...]:
    out = tuple(values)
    if not out:
        raise DataError("Manifest must list at least one tensor")
    seen: set[str] = set()
    for spec in out:
        if not isinstance(spec, TensorSpec):
            raise DataError(f"Manifest entries must be TensorSpec, got {type(spec).__name__}")
        if spec.name in seen:
            raise DataError(f"Manifest lists tensor {spec.name!r} twice")
        seen.add(spec.name)
    return out


@attrs.frozen
class Manifest:
    """The ordered list of tensors one update sends. The order is the send order on the wire."""

    entries: tuple[TensorSpec, ...] = attrs.field(converter=_entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    @property
    def checksum(self) -> str:
        """A digest of names, dtypes and shapes in order: both ends must compute the same one."""
        h = hashlib.blake2b(digest_size=16)
        for e in self.entries:
            h.update(f"{e.name}\x1f{e.dtype}\x1f{','.join(map(str, e.shape))}\x1e".encode())
        return h.hexdigest()

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries]

    @classmethod
    def from_json(cls, data: Sequence[Mapping[str, Any]]) -> Manifest:
        if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
            raise DataError(f"manifest must be a list of entries, got {type(data).__name__}")
        return cls(entries=tuple(TensorSpec.from_json(d) for d in data))


@attrs.frozen
class Bucket:
    """Consecutive manifest entries of one dtype that travel as one flat buffer."""

    dtype: str
    indices: tuple[int, ...]
    numel: int


def plan_buckets(manifest: Manifest, bucket_bytes: int) -> list[Bucket]:
    """Group consecutive same-dtype entries into buckets of at most ``bucket_bytes`` (an entry larger
    than that travels alone). Deterministic: both ends call it with the same arguments."""
    check_int("bucket_bytes", bucket_bytes, 1, error=DataError)
    buckets: list[Bucket] = []
    current: list[int] = []
    current_dtype = ""
    current_bytes = 0
    current_numel = 0

    def flush() -> None:
        if current:
            buckets.append(Bucket(dtype=current_dtype, indices=tuple(current), numel=current_numel))

    for i, spec in enumerate(manifest.entries):
        fits = current and spec.dtype == current_dtype and current_bytes + spec.nbytes <= bucket_bytes
        if not fits:
            flush()
            current = []
            current_dtype = spec.dtype
            current_bytes = 0
            current_numel = 0
        current.append(i)
        current_bytes += spec.nbytes
        current_numel += spec.numel
    flush()
    return buckets
