"""The trainer↔worker tensor channel used by broadcast updates, on both ends.

The trainer is rank 0 and hosts the rendezvous store; the vLLM workers are ranks ``rank_offset ..``.
Two transports share this one handshake:

* ``gloo`` — torch's ``TCPStore`` + ``ProcessGroupGloo`` bound to the rendezvous address, CPU tensors.
  Runs anywhere; it is how CI exercises the exact control flow of the NCCL path against a real vLLM.
* ``nccl`` — vLLM's ``StatelessProcessGroup`` + ``PyNcclCommunicator`` (a group that does not touch
  torch's global process group, so it coexists with FSDP's), CUDA tensors on the current stream.

Bucketed sending (:func:`send_manifest`) and receiving (:func:`receive_manifest`) use one flat buffer per
:class:`~ludic_vllm.update_wire.Bucket`, so a model costs a few collectives rather than one per parameter.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ludic_core.errors import ConfigError, DataError, missing_extra
from ludic_vllm.update_wire import TRANSPORTS, Manifest, TensorSpec, plan_buckets

if TYPE_CHECKING:
    import torch

__all__ = [
    "TensorGroup",
    "manifest_for",
    "open_group",
    "receive_manifest",
    "send_manifest",
]


class TensorGroup(Protocol):
    """A broadcast channel between the trainer (rank 0) and the workers."""

    rank: int
    world_size: int
    device: Any

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None: ...

    def close(self) -> None: ...


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise missing_extra("ludic-vllm", "publisher", "torch") from exc
    return torch


class GlooGroup:
    """``ProcessGroupGloo`` over a ``TCPStore``; rank 0 hosts the store."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        timeout_s: float,
        store: Any | None = None,
    ) -> None:
        torch = _torch()
        dist = torch.distributed
        timeout = timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(
                host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False
            )
        self._store = store
        options = dist.ProcessGroupGloo._Options()
        # Bind to the rendezvous address: connections stay on that interface (loopback in tests)
        # instead of whatever the hostname resolves to.
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        options._timeout = timeout
        self._pg = dist.ProcessGroupGloo(dist.PrefixStore("ludic", store), rank, world_size, options)
        self.rank = rank
        self.world_size = world_size
        self.device = torch.device("cpu")

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        self._pg.broadcast(tensor, src).wait()

    def close(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            with contextlib.suppress(RuntimeError):  # already broken: nothing left to abort
                pg.abort()
        self._store = None


class NcclGroup:
    """vLLM's ``StatelessProcessGroup`` + ``PyNcclCommunicator`` on one CUDA device."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        timeout_s: float,
        device: Any,
        listen_socket: socket.socket | None = None,
    ) -> None:
        torch = _torch()
        from ludic_vllm._compat import pynccl_communicator, stateless_process_group

        spg_cls = stateless_process_group()
        kwargs: dict[str, Any] = {"store_timeout": int(max(1, timeout_s))}
        if listen_socket is not None:
            kwargs["listen_socket"] = listen_socket
        self._spg = spg_cls.create(host=host, port=port, rank=rank, world_size=world_size, **kwargs)
        self.device = torch.device(device)
        self._comm = pynccl_communicator()(self._spg, device=self.device)
        self.rank = rank
        self.world_size = world_size

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        torch = _torch()
        self._comm.broadcast(tensor, src=src, stream=torch.cuda.current_stream(self.device))

    def synchronize(self) -> None:
        _torch().cuda.synchronize(self.device)

    def close(self) -> None:
        self._comm = None
        self._spg = None


def open_group(
    transport: str,
    *,
    host: str,
    port: int,
    rank: int,
    world_size: int,
    timeout_s: float,
    device: Any = None,
    store: Any | None = None,
    listen_socket: socket.socket | None = None,
) -> TensorGroup:
    """Join (or, as rank 0, host) the channel. Blocks until every rank has joined."""
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport must be one of {sorted(TRANSPORTS)}, got {transport!r}")
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank must be in [0, {world_size}), got {rank}")
    if transport == "gloo":
        return GlooGroup(
            host=host, port=port, rank=rank, world_size=world_size, timeout_s=timeout_s, store=store
        )
    return NcclGroup(
        host=host,
        port=port,
        rank=rank,
        world_size=world_size,
        timeout_s=timeout_s,
        device=device if device is not None else "cuda",
        listen_socket=listen_socket,
    )


def dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def manifest_for(named_tensors: Mapping[str, torch.Tensor]) -> Manifest:
    """The manifest of a state dict, in its iteration order (the send order)."""
    return Manifest(
        entries=tuple(
            TensorSpec(name=name, dtype=dtype_name(t), shape=tuple(t.shape))
            for name, t in named_tensors.items()
        )
    )


def send_manifest(
    group: TensorGroup,
    manifest: Manifest,
    named_tensors: Mapping[str, torch.Tensor],
    *,
    bucket_bytes: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> None:
    """Rank 0: broadcast every tensor of ``manifest`` bucket by bucket. ``should_stop`` is checked
    between buckets so a failed update stops sending early."""
    torch = _torch()
    for bucket in plan_buckets(manifest, bucket_bytes):
        if should_stop():
            raise DataError("send stopped: the server reported the update failed")
        parts = []
        for i in bucket.indices:
            spec = manifest.entries[i]
            t = named_tensors[spec.name].detach()
            if dtype_name(t) != spec.dtype or tuple(t.shape) != spec.shape:
                raise DataError(
                    f"tensor {spec.name!r} changed since the manifest was built: "
                    f"{dtype_name(t)}{tuple(t.shape)} vs {spec.dtype}{spec.shape}"
                )
            parts.append(t.to(group.device).reshape(-1))
        flat = parts[0].contiguous() if len(parts) == 1 else torch.cat(parts)
        group.broadcast(flat, 0)
    sync = getattr(group, "synchronize", None)
    if sync is not None:
        sync()


def receive_manifest(
    group: TensorGroup, manifest: Manifest, *, bucket_bytes: int
) -> Iterator[tuple[str, Any]]:
    """Worker side: yield ``(name, tensor)`` in manifest order, receiving one flat buffer per bucket.
    The tensors are views into the bucket buffer; the consumer copies them into the model."""
    torch = _torch()
    for bucket in plan_buckets(manifest, bucket_bytes):
        flat = torch.empty(bucket.numel, dtype=getattr(torch, bucket.dtype), device=group.device)
        group.broadcast(flat, 0)
        offset = 0
        for i in bucket.indices:
            spec = manifest.entries[i]
            yield spec.name, flat[offset : offset + spec.numel].view(spec.shape)
            offset += spec.numel
