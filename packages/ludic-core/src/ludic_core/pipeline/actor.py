"""The actor side of pipeline RL: generate SAW batches with the current policy and push them to Redis.

Each iteration of :meth:`RedisPipelineActor.run` waits while the queue holds ``max_queue_len`` messages
(failing after ``backpressure_timeout_s``), so a batch is generated only when there is room for it;
calls ``before_batch(step)``; reads ``client.get_policy_version()`` (retried until
``version_deadline_s``, never defaulted); generates the batch through its
:class:`~ludic_core.batch_sources.RolloutBatchSource`; tags each item with the version its calls
reported, else the version just read (the oldest weights it can have used, so staleness is never
underestimated); and pushes one msgpack message (:mod:`ludic_core.pipeline.wire`) with one ``RPUSH``,
never retried. Once Redis answers, the message is the learner's to deliver exactly once; an actor killed
before that loses only the batch no learner saw. ``stop_event`` is checked between batches (a batch in
progress is finished and pushed first), ``max_batches`` bounds the pushes, cancelling drops the batch in
flight, and errors outside the rollout settings' ``on_failure`` policy propagate.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.errors import ConfigError, DataError, EpisodeError, LudicTimeoutError
from ludic_core.inference import VersionedClient
from ludic_core.logs import get_logger
from ludic_core.packed_saw import with_meta
from ludic_core.pipeline.connection import (
    AsyncRedis,
    PinnedConnection,
    close_client,
    connect_redis,
    redact_url,
    redis_call,
)
from ludic_core.pipeline.versions import read_policy_version
from ludic_core.pipeline.wire import (
    DEFAULT_QUEUE_KEY,
    DEFAULT_WIRE_LIMITS,
    BatchMessage,
    WireLimits,
    encode_parts,
)
from ludic_core.saw import SAWItem
from ludic_core.validation import check_int, check_number

__all__ = ["ActorStats", "RedisPipelineActor", "run_pipeline_actor"]

log = get_logger(__name__)


@attrs.define
class ActorStats:
    """Running counters of one actor (``actor.stats``; also returned by :meth:`RedisPipelineActor.run`)."""

    batches_pushed: int = 0
    items_pushed: int = 0
    rollouts_pushed: int = 0
    bytes_pushed: int = 0
    empty_batches: int = 0
    items_tagged_by_actor: int = 0
    backpressure_waits: int = 0
    backpressure_wait_s: float = 0.0
    last_policy_version: int | None = None


def default_actor_id() -> str:
    """``host:pid:random`` — unique per actor instance, readable in queue dumps and logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class RedisPipelineActor:
    """Generates batches with ``source`` and RPUSHes them to ``queue_key`` (see the module docstring).

    Args:
        source: a :class:`~ludic_core.batch_sources.RolloutBatchSource` (engine, requests provider,
            rollout settings, credit assigner, filter); its step counter numbers the actor's batches,
            and its ``state_dict`` is what an actor restart resumes from.
        redis_url: e.g. ``redis://127.0.0.1:6379/0``.
        queue_key: the Redis list shared with the learner's :class:`RedisBatchSource`.
        client: the sampler whose version tags the data (``None``: every item must already carry a
            version reported by its model calls).
        max_queue_len: back-pressure bound in messages (``None``: unbounded).
        backpressure_timeout_s: the longest wait for room in the queue.
        version_timeout_s / version_deadline_s: per-attempt and overall bound on reading the version.
        max_consecutive_empty: raise after this many batches in a row without items (every episode
            failed or was filtered), instead of spinning.
        before_batch: ``await before_batch(step)`` before each batch's version read.
        actor_id: name in the messages (default ``host:pid:random``).
        connect_timeout_s / command_timeout_s: Redis connection and per-command bounds.
        wire_limits: size bounds on a message and its batch meta; a batch over them is refused before
            it is pushed (give the learner's ``RedisBatchSource`` the same).
    """

    def __init__(
        self,
        source: RolloutBatchSource,
        *,
        redis_url: str,
        queue_key: str = DEFAULT_QUEUE_KEY,
        client: VersionedClient | None = None,
        max_queue_len: int | None = 32,
        backpressure_timeout_s: float = 600.0,
        version_timeout_s: float = 10.0,
        version_deadline_s: float = 120.0,
        max_consecutive_empty: int = 10,
        before_batch: Callable[[int], Awaitable[None]] | None = None,
        actor_id: str | None = None,
        connect_timeout_s: float = 10.0,
        command_timeout_s: float = 30.0,
        wire_limits: WireLimits = DEFAULT_WIRE_LIMITS,
    ) -> None:
        if not isinstance(source, RolloutBatchSource):
            raise ConfigError(
                "RedisPipelineActor.source must be a RolloutBatchSource (engine, requests, settings, "
                f"credit assigner), got {type(source).__name__}"
            )
        if not isinstance(queue_key, str) or not queue_key:
            raise ConfigError(f"RedisPipelineActor.queue_key must be a non-empty str, got {queue_key!r}")
        if client is not None and not callable(getattr(client, "get_policy_version", None)):
            raise ConfigError(
                f"RedisPipelineActor.client must be a VersionedClient (with get_policy_version), "
                f"got {type(client).__name__}"
            )
        if before_batch is not None and not callable(before_batch):
            raise ConfigError(f"RedisPipelineActor.before_batch must be callable, got {before_batch!r}")
        check_int("RedisPipelineActor.max_queue_len", max_queue_len, 1, optional=True)
        check_int("RedisPipelineActor.max_consecutive_empty", max_consecutive_empty, 1)
        for name, value in (
            ("backpressure_timeout_s", backpressure_timeout_s),
            ("version_timeout_s", version_timeout_s),
            ("version_deadline_s", version_deadline_s),
            ("connect_timeout_s", connect_timeout_s),
            ("command_timeout_s", command_timeout_s),
        ):
            check_number(f"RedisPipelineActor.{name}", value, minimum=0, exclusive=True)
        if actor_id is not None and (not isinstance(actor_id, str) or not actor_id):
            raise ConfigError(
                f"RedisPipelineActor.actor_id must be a non-empty str or None, got {actor_id!r}"
            )
        # Generation is exactly the online batch source's (same requests, seeds, credit and filters);
        # the actor adds version reads, tagging, back-pressure and the queue around it.
        if not isinstance(wire_limits, WireLimits):
            raise ConfigError(f"RedisPipelineActor.wire_limits must be a WireLimits, got {wire_limits!r}")
        self.wire_limits = wire_limits
        self.source = source
        self.redis_url = redis_url
        self.queue_key = queue_key
        self.client = client
        self.max_queue_len = max_queue_len
        self.backpressure_timeout_s = float(backpressure_timeout_s)
        self.version_timeout_s = float(version_timeout_s)
        self.version_deadline_s = float(version_deadline_s)
        self.max_consecutive_empty = max_consecutive_empty
        self.before_batch = before_batch
        self.actor_id = actor_id or default_actor_id()
        self.connect_timeout_s = float(connect_timeout_s)
        self.command_timeout_s = float(command_timeout_s)
        self.stats = ActorStats()
        self._redis: AsyncRedis | None = None
        # The pushes' own connection: one RPUSH per batch without redis-py's pool round per call.
        self._pushes: PinnedConnection | None = None

    # -- connection --------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the Redis connection (PING within ``connect_timeout_s``); a no-op when open."""
        if self._redis is None:
            self._redis = await connect_redis(self.redis_url, connect_timeout_s=self.connect_timeout_s)
            self._pushes = PinnedConnection(self._redis)

    async def aclose(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            pushes, self._pushes = self._pushes, None
            await close_client(redis, pushes)

    async def __aenter__(self) -> RedisPipelineActor:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _conn(self) -> AsyncRedis:
        if self._redis is None:
            raise ConfigError("RedisPipelineActor is not connected; call connect() or use `async with`")
        return self._redis

    def _push_connection(self) -> PinnedConnection:
        self._conn()  # raises when not connected
        assert self._pushes is not None  # made with the client, in connect()
        return self._pushes

    async def _call(self, awaitable: Awaitable[Any], what: str) -> Any:
        return await redis_call(awaitable, what=what, url=self.redis_url, timeout_s=self.command_timeout_s)

    # -- the loop ----------------------------------------------------------------------------------

    async def run(
        self, *, stop_event: asyncio.Event | None = None, max_batches: int | None = None
    ) -> ActorStats:
        """Produce and push batches until ``stop_event`` is set or ``max_batches`` were pushed.

        Opens the connection if needed and closes it on return when it opened it.
        """
        check_int("RedisPipelineActor.run(max_batches)", max_batches, 1, optional=True)
        opened_here = self._redis is None
        await self.connect()
        pushed = 0
        consecutive_empty = 0
        log.info("pipeline.actor_started", actor_id=self.actor_id, queue=self.queue_key, step=self.step)
        try:
            while max_batches is None or pushed < max_batches:
                if stop_event is not None and stop_event.is_set():
                    break
                if not await self.wait_for_room(stop_event):
                    break
                message = await self.produce_batch()
                if message is None:
                    consecutive_empty += 1
                    if consecutive_empty >= self.max_consecutive_empty:
                        raise EpisodeError(
                            f"actor {self.actor_id!r}: {consecutive_empty} consecutive batches produced no "
                            f"items (every episode failed or was filtered; last step {self.step - 1}); "
                            "see the rollout_engine.episodes_failed log events"
                        )
                    continue
                consecutive_empty = 0
                await self.push(message)
                pushed += 1
        finally:
            log.info(
                "pipeline.actor_stopped",
                actor_id=self.actor_id,
                batches_pushed=self.stats.batches_pushed,
                items_pushed=self.stats.items_pushed,
            )
            if opened_here:
                await self.aclose()
        return self.stats

    async def wait_for_room(self, stop_event: asyncio.Event | None = None) -> bool:
        """Wait until the queue holds fewer than ``max_queue_len`` messages.

        Returns ``False`` if ``stop_event`` was set while waiting; raises :class:`LudicTimeoutError`
        after ``backpressure_timeout_s``.
        """
        if self.max_queue_len is None:
            return True
        redis = self._conn()
        started = time.monotonic()
        delay = 0.01
        waited = False
        while True:
            length = int(await self._call(redis.llen(self.queue_key), f"LLEN {self.queue_key!r}"))
            if length < self.max_queue_len:
                break
            elapsed = time.monotonic() - started
            if not waited:
                waited = True
                self.stats.backpressure_waits += 1
                log.info(
                    "pipeline.actor_backpressure",
                    actor_id=self.actor_id,
                    queue=self.queue_key,
                    queue_len=length,
                    max_queue_len=self.max_queue_len,
                )
            if elapsed >= self.backpressure_timeout_s:
                raise LudicTimeoutError(
                    f"actor {self.actor_id!r}: queue {self.queue_key!r} on {redact_url(self.redis_url)} held "
                    f"{length} >= max_queue_len={self.max_queue_len} messages for {self.backpressure_timeout_s} s; "
                    "the learner is not consuming (is it running and reading the same queue_key?)"
                )
            pause = min(delay, self.backpressure_timeout_s - elapsed)
            delay = min(delay * 2, 0.5)
            if stop_event is None:
                await asyncio.sleep(pause)
            else:
                try:
                    await asyncio.wait_for(stop_event.wait(), pause)
                except TimeoutError:
                    pass
                else:
                    return False
        if waited:
            self.stats.backpressure_wait_s += time.monotonic() - started
        return True

    @property
    def step(self) -> int:
        """The step whose requests the next batch uses."""
        return self.source.step

    async def produce_batch(self) -> BatchMessage | None:
        """Generate one batch for the current step and advance the step; ``None`` if it has no items."""
        step = self.step
        if self.before_batch is not None:
            await self.before_batch(step)
        version = (
            None
            if self.client is None
            else await read_policy_version(
                self.client, attempt_timeout_s=self.version_timeout_s, deadline_s=self.version_deadline_s
            )
        )
        batch = await self.source.next_batch()
        if not batch.items:
            self.stats.empty_batches += 1
            log.warning(
                "pipeline.actor_empty_batch",
                actor_id=self.actor_id,
                step=step,
                failed_episodes=batch.meta.get("num_failed_episodes"),
            )
            return None
        items = self._tag(batch.items, version)
        meta = {**batch.meta, "policy_version_read": version, "step": step}
        return BatchMessage(
            items=tuple(items), actor_id=self.actor_id, batch_index=step, created_at=time.time(), meta=meta
        )

    def _tag(self, items: Sequence[SAWItem], version: int | None) -> list[SAWItem]:
        tagged: list[SAWItem] = []
        for item in items:
            current = item.meta.get("policy_version")
            if isinstance(current, int) and not isinstance(current, bool):
                tagged.append(item)
                continue
            if version is None:
                raise DataError(
                    f"actor {self.actor_id!r}: the item of rollout {item.meta.get('rollout_id')!r} has no "
                    "policy_version (its model calls reported none) and the actor has no client to read "
                    "one from; pass client= (a VersionedClient) to RedisPipelineActor"
                )
            self.stats.items_tagged_by_actor += 1
            tagged.append(with_meta(item, {**item.meta, "policy_version": version}))
        return tagged

    async def push(self, *messages: BatchMessage) -> None:
        """Encode ``messages`` and append them to the queue, in order, with one ``RPUSH``.

        Every message is encoded before anything is sent, so a message that cannot be encoded pushes
        none of them; one RPUSH is atomic, so the learner never sees a part of them.
        """
        if not messages:
            return
        encoded = [encode_parts(message, self.wire_limits) for message in messages]
        await self._call(
            self._push_connection().push(self.queue_key, [payload.parts for payload in encoded]),
            f"RPUSH {self.queue_key!r}",
        )
        for message, payload in zip(messages, encoded, strict=True):
            self.stats.batches_pushed += 1
            self.stats.items_pushed += len(message.items)
            self.stats.rollouts_pushed += message.num_rollouts
            self.stats.bytes_pushed += payload.size
            self.stats.last_policy_version = message.policy_version


async def run_pipeline_actor(
    source: RolloutBatchSource,
    *,
    redis_url: str,
    stop_event: asyncio.Event | None = None,
    max_batches: int | None = None,
    **options: Any,
) -> ActorStats:
    """Build a :class:`RedisPipelineActor` and run it until stopped; returns its stats.

    ``options`` are the other :class:`RedisPipelineActor` keyword arguments (``queue_key``, ``client``,
    ``max_queue_len``, ``version_deadline_s``, ...).
    """
    actor = RedisPipelineActor(source, redis_url=redis_url, **options)
    async with actor:
        return await actor.run(stop_event=stop_event, max_batches=max_batches)
