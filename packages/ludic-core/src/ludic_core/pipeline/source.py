"""The learner side of pipeline RL: a :class:`~ludic_core.saw.BatchSource` that pops actor batches
from Redis.

``next_batch`` pops whole actor messages until it holds at least ``min_items`` items; a message is never
split, so GRPO groups arrive whole. Several messages come per round trip: ``LPOP`` with a count (and
``LLEN`` for the batch meta) in one pipelined request, as many messages as the largest message seen so
far says are still missing, so a batch is made of the same messages as when popping one at a time.
Only when the queue is empty does it wait, with an async ``BLPOP`` bounded by ``poll_timeout_s`` (the
event loop is never blocked). If not enough data arrives within ``wait_timeout_s`` it raises
:class:`~ludic_core.errors.LudicTimeoutError` naming the queue; messages popped so far are kept and
served by the next call, in order, so a caller that retries loses nothing. Messages popped but not yet
served (kept for the next call) live in the learner's memory, not in Redis: like any popped message,
they are lost if the learner stops (at most once, as before).

Malformed messages (not msgpack, wrong format or wire version, invalid items: token ids, masks,
non-finite or positive logprobs, non-finite weights, inconsistent lengths, items without a
``policy_version``; see :mod:`ludic_core.pipeline.columns`) are never skipped silently. Each is first
moved (RPUSH) to the dead-letter list ``<queue_key>:dead`` so it is preserved for inspection, then:

* ``on_malformed="raise"`` (default): :class:`~ludic_core.errors.DataError` quoting the start of the
  message. Data corruption usually means a version skew between actor and learner code; a training run
  should stop rather than train on a shrinking, biased subset.
* ``on_malformed="dead_letter"``: counted (``num_malformed``, and ``num_malformed_messages`` in the
  batch meta), logged as a warning, and the source goes on popping.

Staleness is the trainer's job (``TrainerConfig.max_lag`` compares ``item.meta["policy_version"]``
with its step); this source only guarantees every item carries a version.

There is no ``state_dict``: a Redis list is a live stream, not a resumable position. Popped messages
are gone from the queue, so after a learner restart training continues with whatever the actors push
next (with ``max_lag`` discarding what is too old).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable
from typing import Any, Literal, Protocol, cast

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError
from ludic_core.logs import get_logger
from ludic_core.pipeline.connection import AsyncRedis, connect_redis, redact_url, redis_call
from ludic_core.pipeline.wire import (
    DEFAULT_QUEUE_KEY,
    BatchMessage,
    count_rollouts,
    dead_letter_key,
    decode_message,
)
from ludic_core.saw import SAWBatch, SAWItem

__all__ = ["MalformedPolicy", "RedisBatchSource"]

log = get_logger(__name__)

MalformedPolicy = Literal["raise", "dead_letter"]

# Batch-meta counters summed over the messages of a learner batch.
_SUMMED_META = ("num_episodes", "num_failed_episodes", "num_samples_filtered")

# The most messages one LPOP asks for: bounds one reply (64 messages of 1k-token batches: ~6 MB).
_MAX_MESSAGES_PER_POP = 64


class _PipelineRedis(Protocol):
    """The pipelined commands of ``redis.asyncio`` the source adds to :class:`AsyncRedis`."""

    def pipeline(self, transaction: bool = True) -> Any: ...


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
    """Serve batches of at least ``min_items`` SAW items from the Redis list ``queue_key``.

    Args:
        redis_url: e.g. ``redis://127.0.0.1:6379/0``.
        queue_key: the list the actors push to.
        min_items: the smallest batch; whole messages are added until it is reached.
        poll_timeout_s: the BLPOP timeout of one call (how often the wait deadline is checked).
        wait_timeout_s: the longest one ``next_batch`` waits before raising.
        on_malformed: ``"raise"`` or ``"dead_letter"`` (see the module docstring).
        connect_timeout_s: bound on connecting (PING) and on each non-blocking command.
    """

    def __init__(
        self,
        redis_url: str,
        *,
        min_items: int,
        queue_key: str = DEFAULT_QUEUE_KEY,
        poll_timeout_s: float = 1.0,
        wait_timeout_s: float = 600.0,
        on_malformed: MalformedPolicy = "raise",
        connect_timeout_s: float = 10.0,
    ) -> None:
        if isinstance(min_items, bool) or not isinstance(min_items, int) or min_items < 1:
            raise ConfigError(f"RedisBatchSource.min_items must be an int >= 1, got {min_items!r}")
        if not isinstance(queue_key, str) or not queue_key:
            raise ConfigError(f"RedisBatchSource.queue_key must be a non-empty str, got {queue_key!r}")
        for name, value in (
            ("poll_timeout_s", poll_timeout_s),
            ("wait_timeout_s", wait_timeout_s),
            ("connect_timeout_s", connect_timeout_s),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"RedisBatchSource.{name} must be a number > 0, got {value!r}")
        if on_malformed not in ("raise", "dead_letter"):
            raise ConfigError(
                f"RedisBatchSource.on_malformed must be 'raise' or 'dead_letter', got {on_malformed!r}"
            )
        self.redis_url = redis_url
        self.queue_key = queue_key
        self.min_items = min_items
        self.poll_timeout_s = float(poll_timeout_s)
        self.wait_timeout_s = float(wait_timeout_s)
        self.on_malformed: MalformedPolicy = on_malformed
        self.connect_timeout_s = float(connect_timeout_s)
        self.num_batches = 0
        self.num_messages = 0
        self.num_malformed = 0
        self._pending: list[BatchMessage] = []
        self._pending_items = 0
        self._pending_malformed = 0
        # Raw messages popped ahead and not yet decoded (served first, in order, by the next call).
        self._popped: deque[bytes] = deque()
        self._largest_message = 0
        self._redis: AsyncRedis | None = None

    @property
    def dead_letter_key(self) -> str:
        return dead_letter_key(self.queue_key)

    # -- connection --------------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._redis is None:
            # The socket timeout must outlast one BLPOP, or redis-py would abort the wait itself.
            self._redis = await connect_redis(
                self.redis_url,
                connect_timeout_s=self.connect_timeout_s,
                command_timeout_s=self.poll_timeout_s + self.connect_timeout_s,
            )

    async def aclose(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()

    async def __aenter__(self) -> RedisBatchSource:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _call(self, awaitable: Awaitable[Any], what: str, timeout_s: float | None = None) -> Any:
        return await redis_call(
            awaitable, what=what, url=self.redis_url, timeout_s=timeout_s or self.connect_timeout_s
        )

    # -- batches -----------------------------------------------------------------------------------

    async def next_batch(self) -> SAWBatch:
        await self.connect()
        assert self._redis is not None
        redis = self._redis
        started = time.monotonic()
        queue_len: int | None = None
        while self._pending_items < self.min_items:
            if self._popped:
                await self._take(self._popped.popleft())
                continue
            remaining = self.wait_timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                raise LudicTimeoutError(
                    f"RedisBatchSource: waited {self.wait_timeout_s} s for {self.min_items} items on queue "
                    f"{self.queue_key!r} at {redact_url(self.redis_url)} and got {self._pending_items} (in "
                    f"{len(self._pending)} messages, kept for the next call); are the actors running and "
                    "pushing to the same queue_key?"
                )
            queue_len = await self._pop(redis, remaining)
        messages, self._pending, self._pending_items = self._pending, [], 0
        malformed, self._pending_malformed = self._pending_malformed, 0
        if queue_len is None:
            queue_len = int(await self._call(redis.llen(self.queue_key), f"LLEN {self.queue_key!r}"))
        self.num_batches += 1
        return SAWBatch(
            items=[item for m in messages for item in m.items],
            meta=self._batch_meta(messages, malformed=malformed, queue_len=queue_len),
        )

    def _messages_wanted(self) -> int:
        """How many messages to pop at once: what the largest message seen says is still missing.

        As long as no message is larger than the largest seen, this never pops more than popping one
        at a time until ``min_items`` would; 1 before the first message.
        """
        if self._largest_message == 0:
            return 1
        missing = self.min_items - self._pending_items
        return max(1, min(_MAX_MESSAGES_PER_POP, math.ceil(missing / self._largest_message)))

    async def _pop(self, redis: AsyncRedis, remaining_s: float) -> int | None:
        """Pop into ``self._popped``; returns the queue length after the pop when it was read with it."""
        wanted = self._messages_wanted()
        pipe = cast(_PipelineRedis, redis).pipeline(transaction=False)
        pipe.lpop(self.queue_key, wanted)
        pipe.llen(self.queue_key)
        popped, length = await self._call(pipe.execute(), f"LPOP {self.queue_key!r} {wanted} + LLEN")
        if popped:
            self._popped.extend(popped)
            return int(length)
        # The queue is empty: wait for the next message, at most one poll interval.
        poll = min(self.poll_timeout_s, remaining_s)
        got = await self._call(
            redis.blpop([self.queue_key], timeout=poll),
            f"BLPOP {self.queue_key!r}",
            timeout_s=poll + self.connect_timeout_s,
        )
        if got is not None:
            self._popped.append(got[1])
        return None

    async def _take(self, raw: bytes) -> None:
        message = await self._decode_or_dead_letter(raw)
        if message is not None:
            self._pending.append(message)
            self._pending_items += len(message.items)
            self._largest_message = max(self._largest_message, len(message.items))
            self.num_messages += 1

    async def _decode_or_dead_letter(self, raw: bytes) -> BatchMessage | None:
        try:
            return decode_message(raw)
        except DataError as exc:
            assert self._redis is not None
            # Preserve the bytes before anything else: the message is already off the queue.
            await self._call(self._redis.rpush(self.dead_letter_key, raw), f"RPUSH {self.dead_letter_key!r}")
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

    def _batch_meta(self, messages: list[BatchMessage], *, malformed: int, queue_len: int) -> dict[str, Any]:
        items: list[SAWItem] = [item for m in messages for item in m.items]
        versions = [int(item.meta["policy_version"]) for item in items]
        now = time.time()
        ages = [max(0.0, now - m.created_at) for m in messages]
        # Rewards per rollout, not per item: a 5-turn episode must not count five times.
        rollout_rewards: dict[Any, float] = {}
        for item in items:
            reward = item.meta.get("total_reward")
            if isinstance(reward, (int, float)) and not isinstance(reward, bool):
                key = item.meta.get("rollout_id", id(item))
                rollout_rewards.setdefault(key, float(reward))
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
            "queue_len_after": queue_len,
            "avg_total_reward": _mean(list(rollout_rewards.values())),
            "avg_completion_length": _mean([_completion_length(i) for i in items]),
            "avg_prompt_length": _mean([_prompt_length(i) for i in items]),
        }
        for key in _SUMMED_META:
            values = [m.meta.get(key) for m in messages]
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                meta[key] = sum(values)
        return meta
