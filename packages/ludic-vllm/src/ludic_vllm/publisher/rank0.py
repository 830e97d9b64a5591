"""Publish from rank 0 only.

Under FSDP every rank takes part in gathering full tensors (that is a collective), but only one process
may talk to the servers. Wrap the real publisher: rank 0 builds and uses it; other ranks return at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["Rank0OnlyPublisher"]


class _Publisher(Protocol):
    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None: ...

    async def aclose(self) -> None: ...


def _current_rank() -> int:
    try:
        import torch.distributed as dist
    except ImportError:
        return 0
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


class Rank0OnlyPublisher:
    """Builds ``make_inner()`` lazily on rank 0 and forwards to it; a no-op on other ranks."""

    def __init__(self, make_inner: Callable[[], _Publisher], *, rank: int | None = None) -> None:
        self._make_inner = make_inner
        self._rank = rank
        self._inner: _Publisher | None = None

    @property
    def rank(self) -> int:
        return _current_rank() if self._rank is None else self._rank

    @property
    def is_publisher(self) -> bool:
        return self.rank == 0

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        if not self.is_publisher:
            return
        if self._inner is None:
            self._inner = self._make_inner()
        await self._inner.publish(named_tensors, version=version)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()
            self._inner = None
