"""Publish weights over a collective: :class:`GlooPublisher` (CPU tensors, any host) and
:class:`NcclPublisher` (GPU). Same handshake for both:

1. **connect** — ask each server its worker count, give them ranks ``1..`` after the trainer's rank 0,
   then concurrently host the group (trainer) and ``POST /ludic/transport/init`` to every server, which
   blocks until its workers have joined.
2. **publish** — build the manifest (checkpoint-format names, dtypes, shapes; normalised HF/PEFT names),
   start ``POST /ludic/update`` on every server, and broadcast the tensors in flat buckets while those
   calls are in flight. A server that fails the update stops the sending at the next bucket; anything
   that does not finish within ``timeout_s`` raises with what it was waiting for.
3. **confirm** — every server must report the new version.

After any failure the channel is torn down on both ends and the next publish reconnects.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError
from ludic_core.logs import get_logger
from ludic_vllm.collective import TensorGroup, manifest_for, open_group, send_manifest
from ludic_vllm.control import UpdateResult
from ludic_vllm.errors import ServerError
from ludic_vllm.publisher._threads import in_daemon_thread
from ludic_vllm.publisher.base import DEFAULT_PUBLISH_SETTINGS, PublisherBase, PublishSettings
from ludic_vllm.update_wire import DEFAULT_BUCKET_BYTES, TRANSPORTS

__all__ = ["BroadcastPublisher", "GlooPublisher", "NcclPublisher"]

log = get_logger("ludic_vllm.publisher")


class BroadcastPublisher(PublisherBase):
    """Trainer side of a broadcast update over ``transport`` (``"gloo"`` or ``"nccl"``)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        transport: str,
        master_address: str = "127.0.0.1",
        master_port: int = 0,
        device: Any = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        connect_timeout_s: float = 300.0,
        settings: PublishSettings = DEFAULT_PUBLISH_SETTINGS,
    ) -> None:
        super().__init__(servers, settings)
        if transport not in TRANSPORTS:
            raise ConfigError(f"transport must be one of {sorted(TRANSPORTS)}, got {transport!r}")
        self.transport = transport
        self.master_address = master_address
        self.master_port = master_port
        self.device = device
        self.bucket_bytes = bucket_bytes
        self.connect_timeout_s = connect_timeout_s
        self._group: TensorGroup | None = None

    @property
    def connected(self) -> bool:
        return self._group is not None

    # -- connect ----------------------------------------------------------------------------------

    def _host_group(self, world_size: int) -> tuple[Any, int, Any]:
        """Create the rendezvous endpoint (so its port is known) before anyone joins."""
        if self.transport == "gloo":
            import torch.distributed as dist

            store = dist.TCPStore(
                self.master_address,
                self.master_port,
                world_size,
                is_master=True,
                timeout=timedelta(seconds=self.connect_timeout_s),
                wait_for_workers=False,
            )
            return store, int(store.port), None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.master_address, self.master_port))
        sock.listen()
        return None, int(sock.getsockname()[1]), sock

    async def connect(self) -> None:
        """Form the group with every server's workers (trainer = rank 0)."""
        if self._group is not None:
            return
        sizes = await asyncio.gather(*(c.world_size() for c in self.controls))
        healths = await asyncio.gather(*(c.health() for c in self.controls))
        # A channel left open by an earlier failed publish: close it before opening a new one.
        stale = [c for c, h in zip(self.controls, healths, strict=True) if h.raw.get("transport")]
        await asyncio.gather(*(c.close_transport() for c in stale))
        offsets = []
        next_rank = 1
        for size in sizes:
            offsets.append(next_rank)
            next_rank += size
        world_size = next_rank
        store, port, listen_socket = self._host_group(world_size)
        log.info(
            "connecting", transport=self.transport, servers=self.servers, world_size=world_size, port=port
        )

        def join() -> TensorGroup:
            return open_group(
                self.transport,
                host=self.master_address,
                port=port,
                rank=0,
                world_size=world_size,
                timeout_s=self.connect_timeout_s,
                device=self.device,
                store=store,
                listen_socket=listen_socket,
            )

        group_future = in_daemon_thread(join, name="ludic-publisher-connect")
        inits = [
            asyncio.ensure_future(
                control.init_transport(
                    transport=self.transport,
                    master_address=self.master_address,
                    master_port=port,
                    rank_offset=offset,
                    world_size=world_size,
                    timeout_s=self.connect_timeout_s,
                )
            )
            for control, offset in zip(self.controls, offsets, strict=True)
        ]
        try:
            await self._wait_all(
                [group_future, *inits],
                timeout_s=self.connect_timeout_s + 30.0,
                describe=lambda pending: (
                    f"connecting the {self.transport} group (world size {world_size}): "
                    f"still waiting for {pending}"
                ),
                names=["the trainer's group", *(f"transport init on {u}" for u in self.servers)],
            )
        except BaseException:
            for task in inits:
                task.cancel()
            if group_future.done() and not group_future.cancelled() and group_future.exception() is None:
                group_future.result().close()
            if listen_socket is not None:
                listen_socket.close()
            raise
        self._group = group_future.result()

    @staticmethod
    async def _wait_all(
        futures: list[asyncio.Future[Any]],
        *,
        timeout_s: float,
        describe: Any,
        names: list[str],
    ) -> None:
        """Wait for every future; the first failure or the deadline raises at once."""
        deadline = time.monotonic() + timeout_s
        pending = set(futures)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waiting = [n for n, f in zip(names, futures, strict=True) if not f.done()]
                raise LudicTimeoutError(f"{describe(waiting)} after {timeout_s:.0f}s")
            done, pending = await asyncio.wait(
                pending, timeout=remaining, return_when=asyncio.FIRST_EXCEPTION
            )
            for fut in done:
                exc = fut.exception()
                if exc is not None:
                    name = names[futures.index(fut)]
                    if isinstance(exc, ServerError):
                        raise type(exc)(
                            f"{name} failed: {exc}", status=exc.status, body=exc.body, url=exc.url
                        ) from exc
                    if isinstance(exc, (TransportError, ConfigError, DataError, LudicTimeoutError)):
                        raise type(exc)(f"{name} failed: {exc}") from exc
                    raise TransportError(f"{name} failed: {type(exc).__name__}: {exc}") from exc

    # -- publish ----------------------------------------------------------------------------------

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        """Send ``named_tensors`` as policy ``version`` to every server and confirm it is live."""
        tensors = self.prepare(named_tensors, version)
        update_id = self.update_id(version)
        applied = await asyncio.gather(*(c.update_status(update_id) for c in self.controls))
        if all(v == version for v in applied):
            log.info("update already applied; nothing to send", version=version, update_id=update_id)
            await self.confirm(version)
            return
        if any(v is not None for v in applied):
            raise DataError(
                f"update {update_id} is applied on some servers only: {dict(zip(self.servers, applied, strict=True))}"
            )
        await self.connect()
        group = self._group
        assert group is not None
        manifest = manifest_for(tensors)
        stop = threading.Event()
        started = time.monotonic()
        updates = [
            asyncio.ensure_future(
                control.update(
                    update_id=update_id,
                    version=version,
                    manifest=manifest,
                    bucket_bytes=self.bucket_bytes,
                    pause_mode=self.settings.pause_mode,
                    timeout_s=self.settings.timeout_s,
                    force=self.settings.allow_version_reset,
                )
            )
            for control in self.controls
        ]
        for task in updates:
            task.add_done_callback(lambda t: stop.set() if not t.cancelled() and t.exception() else None)

        def send() -> None:
            send_manifest(group, manifest, tensors, bucket_bytes=self.bucket_bytes, should_stop=stop.is_set)

        sender = in_daemon_thread(send, name="ludic-publisher-send")
        try:
            await self._wait_all(
                [sender, *updates],
                timeout_s=self.settings.timeout_s,
                describe=lambda pending: (
                    f"publishing version {version} ({len(manifest)} tensors, "
                    f"{manifest.total_bytes / 2**20:.1f} MiB over {self.transport}): still waiting for {pending}"
                ),
                names=[
                    f"sending {len(manifest)} tensors",
                    *(f"the update on {u} (it returns once the weights are applied)" for u in self.servers),
                ],
            )
        except BaseException:
            stop.set()
            for task in updates:
                task.cancel()
            # The sender may still fail later (its group is being aborted): nobody awaits it any more.
            sender.add_done_callback(lambda f: f.cancelled() or f.exception())
            await self._teardown()
            raise
        results: list[UpdateResult] = [t.result() for t in updates]
        for url, result in zip(self.servers, results, strict=True):
            if result.version != version:
                raise DataError(f"{url} applied version {result.version}, expected {version}")
        await self.confirm(version)
        log.info(
            "published",
            version=version,
            tensors=len(manifest),
            mib=round(manifest.total_bytes / 2**20, 2),
            took_s=round(time.monotonic() - started, 3),
        )

    async def _teardown(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.close()

        async def close(control: Any) -> None:
            # Best effort and short: a server whose update failed has already dropped its side of the
            # channel, and one still busy with the update drops it when the aborted group errors out;
            # connect() clears a stale one if it is still there.
            try:
                await asyncio.wait_for(control.close_transport(timeout_s=2.0), 2.0)
            except Exception as exc:
                log.warning(
                    "could not close the server's transport", server=control.base_url, error=repr(exc)
                )

        await asyncio.gather(*(close(c) for c in self.controls))

    async def aclose(self) -> None:
        if self._group is not None:
            await self._teardown()
        await super().aclose()


class GlooPublisher(BroadcastPublisher):
    """Broadcast over Gloo: CPU tensors, works on any host (and in CI against vLLM's CPU build)."""

    def __init__(self, servers: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__(servers, transport="gloo", **kwargs)


class NcclPublisher(BroadcastPublisher):
    """Broadcast over NCCL through vLLM's stateless process group. Needs CUDA and vLLM installed on the
    trainer; ``device`` must differ from the servers' GPUs. Under FSDP wrap it in
    :class:`~ludic_vllm.publisher.rank0.Rank0OnlyPublisher`."""

    def __init__(self, servers: str | Sequence[str], *, device: Any = "cuda", **kwargs: Any) -> None:
        super().__init__(servers, transport="nccl", device=device, **kwargs)
