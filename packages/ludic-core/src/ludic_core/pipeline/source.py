"""The learner side of pipeline RL: a :class:`~ludic_core.saw.BatchSource` that claims actor batches
from Redis, exactly once.

``next_batch`` takes whole actor messages (a GRPO group is never split) until it holds ``min_items``
items; it waits (async ``BLMOVE``, at most ``poll_timeout_s`` per round trip) only when the queue is
empty, and raises :class:`~ludic_core.errors.LudicTimeoutError` after ``wait_timeout_s``, keeping what it
took for the next call. A claim moves a message (``LMOVE``) to ``<queue_key>:processing:<consumer>``,
where it stays until a checkpoint that trained on it is durable: :meth:`RedisBatchSource.state_dict`
records the consumed position, :meth:`RedisBatchSource.checkpoint_committed` acknowledges it, and
:meth:`RedisBatchSource.load_state_dict` resumes there, re-delivering in order what was claimed after
it, so each message is trained into exactly one kept step. Malformed messages, and messages newer than
``current_version``, go to ``<queue_key>:dead`` (``on_malformed`` picks raise or count-and-skip).
Staleness is the trainer's check (``max_lag``). Full semantics: docs/packages/redis-pipeline.md.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError, DataError, LudicError, LudicTimeoutError
from ludic_core.logs import get_logger
from ludic_core.pipeline.claims import TOMBSTONE, ClaimKeys
from ludic_core.pipeline.connection import (
    AsyncRedis,
    PinnedConnection,
    close_client,
    connect_redis,
    redact_url,
    redis_call,
)
from ludic_core.pipeline.wire import (
    DEFAULT_QUEUE_KEY,
    DEFAULT_WIRE_LIMITS,
    BatchMessage,
    WireLimits,
    count_rollouts,
    dead_letter_key,
    decode_message,
    encode_message,
)
from ludic_core.saw import SAWBatch, SAWItem
from ludic_core.validation import check_int, check_number, check_one_of

__all__ = ["MalformedPolicy", "RedisBatchSource"]

log = get_logger(__name__)

MalformedPolicy = Literal["raise", "dead_letter"]

# Batch-meta counters summed over the messages of a learner batch.
_SUMMED_META = ("num_episodes", "num_failed_episodes", "num_samples_filtered")

# The most messages one claim asks for: bounds one reply (64 messages of 1k-token batches: ~6 MB).
_MAX_MESSAGES_PER_CLAIM = 64

# What a state_dict says it is, so a checkpoint of another source is refused by name.
_STATE_FORMAT = "ludic.pipeline.redis_source"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


# The lengths the SAW builder records in meta; counting the mask (a pass over every token) only for
# items without them.
def _completion_length(item: SAWItem) -> float:
    length = item.meta.get("completion_length")
    return float(item.num_action_tokens if length is None else length)


def _prompt_length(item: SAWItem) -> float:
    length = item.meta.get("prompt_length")
    return float(len(item) - item.num_action_tokens if length is None else length)


class RedisBatchSource:
    """Serve batches of at least ``min_items`` SAW items claimed from the Redis list ``queue_key``.

    Args:
        redis_url: e.g. ``redis://127.0.0.1:6379/0``.
        queue_key: the list the actors push to.
        min_items: the smallest batch; whole messages are added until it is reached.
        consumer: this learner's name among those sharing the queue (one per data-parallel rank; the
            same after a restart, so it finds its claims again).
        poll_timeout_s: the BLMOVE timeout of one call (how often the wait deadline is checked).
        wait_timeout_s: the longest one ``next_batch`` waits before raising.
        on_malformed: ``"raise"`` or ``"dead_letter"`` (see the module docstring).
        current_version: ``() -> int``, the learner's current policy version (``lambda: trainer.step``):
            messages with newer items are dead-lettered (see the module docstring); ``None``: no check.
        keep_trained_messages: acknowledged messages kept for a resume from an older checkpoint.
        connect_timeout_s: bound on connecting (PING) and on each non-blocking command.
        wire_limits: size bounds on a message and its batch meta; a message over them is malformed
            (dead-lettered, the error naming the limit).
    """

    def __init__(
        self,
        redis_url: str,
        *,
        min_items: int,
        queue_key: str = DEFAULT_QUEUE_KEY,
        consumer: str = "learner-0",
        poll_timeout_s: float = 1.0,
        wait_timeout_s: float = 600.0,
        on_malformed: MalformedPolicy = "raise",
        current_version: Callable[[], int] | None = None,
        keep_trained_messages: int = 256,
        connect_timeout_s: float = 10.0,
        wire_limits: WireLimits = DEFAULT_WIRE_LIMITS,
    ) -> None:
        check_int("RedisBatchSource.min_items", min_items, 1)
        if not isinstance(queue_key, str) or not queue_key:
            raise ConfigError(f"RedisBatchSource.queue_key must be a non-empty str, got {queue_key!r}")
        if not isinstance(consumer, str) or not consumer or any(c.isspace() for c in consumer):
            raise ConfigError(
                f"RedisBatchSource.consumer must be a non-empty str without spaces, got {consumer!r}"
            )
        for name, value in (
            ("poll_timeout_s", poll_timeout_s),
            ("wait_timeout_s", wait_timeout_s),
            ("connect_timeout_s", connect_timeout_s),
        ):
            check_number(f"RedisBatchSource.{name}", value, minimum=0, exclusive=True)
        check_one_of("RedisBatchSource.on_malformed", on_malformed, ("raise", "dead_letter"))
        if current_version is not None and not callable(current_version):
            raise ConfigError(
                f"RedisBatchSource.current_version must be a callable returning an int, got {current_version!r}"
            )
        check_int("RedisBatchSource.keep_trained_messages", keep_trained_messages, 0)
        if not isinstance(wire_limits, WireLimits):
            raise ConfigError(f"RedisBatchSource.wire_limits must be a WireLimits, got {wire_limits!r}")
        self.wire_limits = wire_limits
        self.redis_url = redis_url
        self.queue_key = queue_key
        self.consumer = consumer
        self.keys = ClaimKeys(queue=queue_key, consumer=consumer)
        self.min_items = min_items
        self.poll_timeout_s = float(poll_timeout_s)
        self.wait_timeout_s = float(wait_timeout_s)
        self.on_malformed: MalformedPolicy = on_malformed
        self.current_version = current_version
        self.keep_trained_messages = keep_trained_messages
        self.connect_timeout_s = float(connect_timeout_s)
        self.num_batches = 0
        self.num_messages = 0
        self.num_malformed = 0
        self.num_future = 0
        self.num_redelivered = 0
        # Positions in this consumer's claim log (see ludic_core.pipeline.claims): acknowledged <=
        # served (in batches handed out) <= fetched (read into memory) <= claimed (on the processing list).
        self._acked = 0
        self._served = 0
        self._fetched = 0
        self._claimed = 0
        self._synced = False
        self._resume_to: int | None = None
        self._commit_to: int | None = None
        self._pending: list[BatchMessage] = []
        self._pending_items = 0
        self._pending_malformed = 0
        self._pending_future = 0
        self._pending_end = 0  # the position after the last message taken into _pending
        # Raw messages fetched ahead and not yet decoded, with their positions (served first, in order).
        self._popped: deque[tuple[int, bytes]] = deque()
        self._largest_message = 0
        self._redis: AsyncRedis | None = None
        # The claims' own connection: the hot round trip skips redis-py's pipeline and pool per call.
        self._claims: PinnedConnection | None = None

    @property
    def dead_letter_key(self) -> str:
        return dead_letter_key(self.queue_key)

    # -- connection --------------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._redis is None:
            self._redis = await connect_redis(self.redis_url, connect_timeout_s=self.connect_timeout_s)
            self._claims = PinnedConnection(self._redis)

    async def aclose(self) -> None:
        """Acknowledge a committed checkpoint not yet acknowledged, then close the connection.

        A failed acknowledgement is logged, not raised: the checkpoint holds the position, and a
        source given its state acknowledges it on resume.
        """
        if self._redis is None:
            return
        try:
            if self._synced and self._commit_to is not None:
                await self._acknowledge()
        except LudicError as exc:
            log.warning(
                "pipeline.ack_on_close_failed", queue=self.queue_key, consumer=self.consumer, error=str(exc)
            )
        finally:
            redis, self._redis = self._redis, None
            claims, self._claims = self._claims, None
            await close_client(redis, claims)

    async def __aenter__(self) -> RedisBatchSource:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _call(self, awaitable: Awaitable[Any], what: str, timeout_s: float | None = None) -> Any:
        try:
            return await redis_call(
                awaitable, what=what, url=self.redis_url, timeout_s=timeout_s or self.connect_timeout_s
            )
        except BaseException:
            # The command may or may not have run (a claim, an acknowledgement), also when the caller
            # was cancelled while it was in flight: read the positions back from Redis before the next.
            self._synced = False
            raise

    # -- checkpoints -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position trained so far: every message of every batch served (plain data)."""
        return {
            "format": _STATE_FORMAT,
            "queue_key": self.queue_key,
            "consumer": self.consumer,
            "consumed": self._served,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at a checkpoint's position: the next call acknowledges what it trained and delivers
        again everything claimed after it (see the module docstring)."""
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise DataError(
                f"RedisBatchSource.load_state_dict: not a RedisBatchSource state (format "
                f"{state.get('format') if isinstance(state, Mapping) else type(state).__name__!r})"
            )
        for key, expected in (("queue_key", self.queue_key), ("consumer", self.consumer)):
            if state.get(key) != expected:
                raise DataError(
                    f"RedisBatchSource.load_state_dict: the checkpoint's {key} is {state.get(key)!r} but this "
                    f"source's is {expected!r}; resume each learner with its own queue and consumer name"
                )
        consumed = check_int(
            "RedisBatchSource.load_state_dict: consumed", state.get("consumed"), 0, error=DataError
        )
        self._resume_to = consumed
        self._commit_to = None
        self._synced = False

    def checkpoint_committed(self, step: int) -> None:
        """Called by the trainer once the checkpoint of ``step`` is durable: the messages it trained
        on (those counted by the last :meth:`state_dict`) are acknowledged by the next call."""
        self._commit_to = self._served
        log.debug("pipeline.checkpoint_committed", queue=self.queue_key, consumer=self.consumer, step=step)

    async def _sync(self, redis: AsyncRedis) -> None:
        """Read this consumer's positions from Redis, resume a loaded checkpoint, and forget what was
        fetched but not served (it is read again from the processing list)."""
        acked, processing, _ = await self._call(
            self.keys.read_boundary(redis), f"positions of {self.keys.processing!r}"
        )
        if self._resume_to is not None:
            if self._resume_to != acked:
                await self._call(
                    self.keys.move_boundary(
                        redis, acked=acked, to=self._resume_to, keep_trained=self.keep_trained_messages
                    ),
                    f"move {self.consumer!r}'s acknowledged boundary {acked} -> {self._resume_to}",
                )
                processing += acked - self._resume_to
                acked = self._resume_to
            self._served = acked
            self._resume_to = None
        else:
            # A fresh source resumes where this consumer's last acknowledgement left off.
            self._served = max(self._served, acked)
        if acked + processing < self._served:
            raise DataError(
                f"consumer {self.consumer!r} of {self.queue_key!r} served messages up to position {self._served} "
                f"but Redis holds claims only up to {acked + processing}: Redis lost writes (run it with "
                "appendonly yes, appendfsync always)"
            )
        self._acked = acked
        self._claimed = acked + processing
        self._fetched = self._served
        self._popped.clear()
        self._pending, self._pending_items, self._pending_malformed, self._pending_future = [], 0, 0, 0
        self._pending_end = self._served
        if self._claimed > self._served:
            log.info(
                "pipeline.redelivering",
                queue=self.queue_key,
                consumer=self.consumer,
                messages=self._claimed - self._served,
                position=self._served,
            )
        self._synced = True

    async def _acknowledge(self) -> None:
        target, self._commit_to = self._commit_to, None
        if target is None or target <= self._acked:
            return
        try:
            assert self._claims is not None  # made with the client, in connect()
            await self._call(
                self.keys.acknowledge(
                    self._claims, acked=self._acked, to=target, keep_trained=self.keep_trained_messages
                ),
                f"acknowledge {self.keys.processing!r} up to position {target}",
            )
        except LudicError:
            self._commit_to = target  # tried again after the positions are read back
            raise
        self._acked = target

    # -- batches -----------------------------------------------------------------------------------

    async def next_batch(self) -> SAWBatch:
        await self.connect()
        assert self._redis is not None
        redis = self._redis
        if not self._synced:
            await self._sync(redis)
        await self._acknowledge()
        started = time.monotonic()
        queue_len: int | None = None
        while self._pending_items < self.min_items:
            if self._popped:
                await self._take(*self._popped.popleft())
                continue
            remaining = self.wait_timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                raise LudicTimeoutError(
                    f"RedisBatchSource: waited {self.wait_timeout_s} s for {self.min_items} items on queue "
                    f"{self.queue_key!r} at {redact_url(self.redis_url)} and got {self._pending_items} (in "
                    f"{len(self._pending)} messages, kept for the next call); are the actors running and "
                    "pushing to the same queue_key?"
                )
            queue_len = await self._fetch_or_claim(redis, remaining)
        messages, self._pending, self._pending_items = self._pending, [], 0
        malformed, self._pending_malformed = self._pending_malformed, 0
        future, self._pending_future = self._pending_future, 0
        self._served = self._pending_end
        if queue_len is None:
            queue_len = int(await self._call(redis.llen(self.queue_key), f"LLEN {self.queue_key!r}"))
        self.num_batches += 1
        items = [item for m in messages for item in m.items]
        meta = self._batch_meta(messages, items, malformed=malformed, future=future, queue_len=queue_len)
        return SAWBatch(items=items, meta=meta)

    def _messages_wanted(self) -> int:
        """How many messages to take at once: what the largest message seen says is still missing.

        As long as no message is larger than the largest seen, this never takes more than taking one
        at a time until ``min_items`` would; 1 before the first message.
        """
        if self._largest_message == 0:
            return 1
        missing = self.min_items - self._pending_items
        return max(1, min(_MAX_MESSAGES_PER_CLAIM, math.ceil(missing / self._largest_message)))

    async def _fetch_or_claim(self, redis: AsyncRedis, remaining_s: float) -> int | None:
        """Read into ``self._popped`` the claims not yet delivered, else claim new messages; returns the
        queue length after a claim when it was read with it."""
        wanted = self._messages_wanted()
        if self._fetched < self._claimed:
            count = min(wanted, self._claimed - self._fetched)
            start = self._fetched - self._acked
            raws = await self._call(
                self.keys.fetch(redis, start, count), f"LRANGE {self.keys.processing!r} {start} +{count}"
            )
            if len(raws) != count:
                self._synced = False
                raise DataError(
                    f"{self.keys.processing!r} holds {len(raws)} messages from index {start} where {count} "
                    "were expected: is another learner using the same consumer name?"
                )
            self.num_redelivered += count
            self._keep_fetched(raws)
            return None
        # One round trip: claim what the queue holds, waiting (at most one poll interval) only when
        # it is empty.
        poll = min(self.poll_timeout_s, remaining_s)
        assert self._claims is not None
        raws, length = await self._call(
            self.keys.claim(self._claims, wanted, poll),
            f"BLMOVE {self.queue_key!r} -> {self.keys.processing!r} + LMOVE x{wanted - 1} + LLEN",
            timeout_s=poll + self.connect_timeout_s,
        )
        self._claimed += len(raws)
        self._keep_fetched(raws)
        return length

    def _keep_fetched(self, raws: list[bytes]) -> None:
        for raw in raws:
            self._popped.append((self._fetched, raw))
            self._fetched += 1

    async def _take(self, position: int, raw: bytes) -> None:
        self._pending_end = position + 1
        if raw == TOMBSTONE:
            return  # dead-lettered before a restart: its position is consumed, nothing to train
        message = await self._decode_or_dead_letter(position, raw)
        if message is None:
            return
        if await self._dead_letter_if_future(position, message):
            return
        self._pending.append(message)
        self._pending_items += len(message.items)
        self._largest_message = max(self._largest_message, len(message.items))
        self.num_messages += 1

    async def _dead_letter(self, position: int, payload: bytes) -> None:
        assert self._redis is not None
        await self._call(
            self.keys.dead_letter(
                self._redis, index=position - self._acked, dead_key=self.dead_letter_key, payload=payload
            ),
            f"RPUSH {self.dead_letter_key!r} + LSET {self.keys.processing!r}",
        )

    async def _decode_or_dead_letter(self, position: int, raw: bytes) -> BatchMessage | None:
        try:
            return decode_message(raw, self.wire_limits)
        except DataError as exc:
            # Preserve the bytes before anything else: nothing else will read this message again.
            await self._dead_letter(position, raw)
            self.num_malformed += 1
            if self.on_malformed == "raise":
                raise DataError(
                    f"RedisBatchSource: malformed message on queue {self.queue_key!r} (moved to "
                    f"{self.dead_letter_key!r}): {exc}"
                ) from exc
            self._pending_malformed += 1
            log.warning(
                "pipeline.malformed_message",
                queue=self.queue_key,
                dead_letter=self.dead_letter_key,
                error=str(exc),
            )
            return None

    async def _dead_letter_if_future(self, position: int, message: BatchMessage) -> bool:
        if self.current_version is None:
            return False
        current = self.current_version()
        newest = max(int(item.meta["policy_version"]) for item in message.items)
        if newest <= current:
            return False
        reason = (
            f"policy_version {newest} is newer than the learner's version {current}: sampled by weights "
            "of a continuation the learner discarded when it resumed an older checkpoint"
        )
        marked = attrs.evolve(message, meta={**message.meta, "dead_letter_reason": reason})
        await self._dead_letter(position, encode_message(marked, self.wire_limits))
        self.num_future += 1
        self._pending_future += 1
        log.warning(
            "pipeline.future_message_dead_lettered",
            queue=self.queue_key,
            dead_letter=self.dead_letter_key,
            actor_id=message.actor_id,
            batch_index=message.batch_index,
            policy_version=newest,
            current_version=current,
        )
        return True

    def _batch_meta(
        self,
        messages: list[BatchMessage],
        items: list[SAWItem],
        *,
        malformed: int,
        future: int,
        queue_len: int,
    ) -> dict[str, Any]:
        metas = [item.meta for item in items]
        # Decoding checked that every item has an int policy_version (BatchMessage refuses others).
        versions = list(map(int, [m["policy_version"] for m in metas]))
        now = time.time()
        ages = [max(0.0, now - m.created_at) for m in messages]
        # Rewards per rollout, not per item: a 5-turn episode must not count five times.
        rollout_rewards: dict[Any, float] = {}
        for item, item_meta in zip(items, metas, strict=True):
            reward = item_meta.get("total_reward")
            if isinstance(reward, (int, float)) and not isinstance(reward, bool):
                rollout_rewards.setdefault(item_meta.get("rollout_id", id(item)), float(reward))
        # The lengths the SAW builder records; counting the mask only for items without them.
        completions: list[Any] = [m.get("completion_length") for m in metas]
        if None in completions:
            completions = [_completion_length(item) for item in items]
        prompts: list[Any] = [m.get("prompt_length") for m in metas]
        if None in prompts:
            prompts = [_prompt_length(item) for item in items]
        meta: dict[str, Any] = {
            "source": "pipeline_redis",
            "queue_key": self.queue_key,
            "num_messages": len(messages),
            "num_samples": len(items),
            "num_rollouts": count_rollouts(items),
            "actor_ids": sorted({m.actor_id for m in messages}),
            "policy_version_min": min(versions),
            "policy_version_max": max(versions),
            "message_age_s_mean": _mean(ages),
            "message_age_s_max": max(ages),
            "num_malformed_messages": malformed,
            "num_future_messages": future,
            "consumer": self.consumer,
            "queue_len_after": queue_len,
            "avg_total_reward": _mean(list(rollout_rewards.values())),
            "avg_completion_length": _mean(list(map(float, completions))),
            "avg_prompt_length": _mean(list(map(float, prompts))),
        }
        for key in _SUMMED_META:
            values = [m.meta.get(key) for m in messages]
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                meta[key] = sum(values)
        return meta
