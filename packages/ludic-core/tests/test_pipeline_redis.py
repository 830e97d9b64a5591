"""Pipeline RL over a real redis-server: actor, learner source, and a concurrent run.

Tests marked ``redis`` start a private ``redis-server`` (see ``redis_server.py``) or use
``LUDIC_REDIS_URL``; the version-reading tests need no server. The wire format has its own tests
(``test_pipeline_wire.py``).
"""

from __future__ import annotations

import asyncio
import json
import math
import pickle
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest
from pipeline_messages import make_item, message

from ludic_core import RolloutBatchSource, RolloutSettings
from ludic_core.credit import GroupNormalizedReturn
from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, ProtocolError, TransportError
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.pipeline import (
    BatchMessage,
    RedisBatchSource,
    RedisPipelineActor,
    decode_message,
    encode_message,
    read_policy_version,
)
from ludic_core.pipeline.local_server import free_loopback_port
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWBatch
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient
from ludic_core.testing.redis import queue_key_for_tests, redis_url_for_tests

GROUP_SIZE = 4
INFERENCE = InferenceSpec(sampling=SamplingParams(max_tokens=4), return_=ReturnSpec.for_rl())


# --- fixtures and builders ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    yield from redis_url_for_tests()


@pytest.fixture
async def queue_key(redis_url: str) -> AsyncIterator[str]:
    async for key in queue_key_for_tests(redis_url):
        yield key


async def raw_rpush(redis_url: str, key: str, *values: bytes) -> None:
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    await client.rpush(key, *values)
    await client.aclose()


async def raw_llen(redis_url: str, key: str) -> int:
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    length = int(await client.llen(key))
    await client.aclose()
    return length


def guess_engine(client: SeededChatClient, *, seed: int = 0) -> RolloutEngine:
    """GuessNumber (secret in 1..4, two guesses): episodes of one or two turns, rewards 0 or 1."""

    def protocol() -> SingleAgentProtocol:
        return SingleAgentProtocol(ScriptedAgent(client, inference=INFERENCE))

    return RolloutEngine(
        env_factories={"guess": lambda: GuessNumberEnv(max_number=4, max_guesses=2)},
        protocol_factories={"scripted": protocol},
        base_seed=seed,
    )


def grpo_requests(groups: int, *, seed: int = 0) -> Any:
    def requests(step: int) -> list[RolloutRequest]:
        base = RolloutRequest(env=EnvSpec("guess"), protocol=ProtocolSpec("scripted"), inference=INFERENCE)
        strategy = GRPORequestStrategy(group_size=GROUP_SIZE, seed=derive_seed(seed, "groups", step))
        return strategy.expand([base] * groups)

    return requests


def make_actor(
    redis_url: str,
    queue_key: str,
    *,
    chat_version: int | None = 3,
    version_source: Any = None,
    **options: Any,
) -> RedisPipelineActor:
    chat = SeededChatClient(["1", "2", "3", "4"], policy_version=chat_version)
    source = RolloutBatchSource(
        engine=guess_engine(chat),
        requests=grpo_requests(options.pop("groups", 2)),
        credit_assigner=GroupNormalizedReturn(GROUP_SIZE),
        settings=RolloutSettings(max_steps=3),
        start_step=options.pop("start_step", 0),
    )
    return RedisPipelineActor(
        source,
        redis_url=redis_url,
        queue_key=queue_key,
        client=version_source if version_source is not None else chat,
        **options,
    )


class FlakyVersions:
    """get_policy_version fails ``failures`` times with a transport error, then returns ``version``."""

    def __init__(self, version: int | object, failures: int = 0, error: Exception | None = None) -> None:
        self.version = version
        self.failures = failures
        self.error = error or TransportError("sampler unreachable")
        self.calls = 0

    async def get_policy_version(self) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.version


# --- version reads (no server) ----------------------------------------------------------------------


async def test_version_read_retries_transient_failures() -> None:
    source = FlakyVersions(7, failures=2)
    version = await read_policy_version(source, attempt_timeout_s=1, deadline_s=5, initial_backoff_s=0.01)  # type: ignore[arg-type]
    assert version == 7 and source.calls == 3


async def test_version_read_fails_loudly_instead_of_guessing() -> None:
    source = FlakyVersions(7, failures=10**6)
    with pytest.raises(TransportError, match=r"could not read the policy version .* Refusing to guess"):
        await read_policy_version(source, attempt_timeout_s=0.1, deadline_s=0.3, initial_backoff_s=0.02)  # type: ignore[arg-type]
    assert source.calls >= 2


async def test_version_read_does_not_retry_config_errors_or_accept_nonsense() -> None:
    config = FlakyVersions(0, failures=1, error=ConfigError("no version configured"))
    with pytest.raises(ConfigError, match="no version configured"):
        await read_policy_version(config, attempt_timeout_s=1, deadline_s=5)  # type: ignore[arg-type]
    assert config.calls == 1
    with pytest.raises(ProtocolError, match=r"get_policy_version\(\) must be an int >= 0, got -1"):
        await read_policy_version(FlakyVersions(-1), attempt_timeout_s=1, deadline_s=5)  # type: ignore[arg-type]


class SlowVersions:
    async def get_policy_version(self) -> int:
        await asyncio.sleep(10)
        return 0


async def test_version_read_bounds_a_hanging_client() -> None:
    with pytest.raises(TransportError, match="TimeoutError"):
        await read_policy_version(
            SlowVersions(), attempt_timeout_s=0.05, deadline_s=0.2, initial_backoff_s=0.01
        )  # type: ignore[arg-type]


# --- actor and source over a real server -------------------------------------------------------------


@pytest.mark.redis
async def test_actor_to_learner_round_trip_keeps_groups_whole(redis_url: str, queue_key: str) -> None:
    actor = make_actor(redis_url, queue_key, chat_version=3, groups=2)
    stats = await actor.run(max_batches=3)
    assert stats.batches_pushed == 3 and stats.items_pushed > 0
    assert stats.items_tagged_by_actor == 0  # the client reported its version on every call

    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=1, wait_timeout_s=5) as source:
        batches = [await source.next_batch() for _ in range(3)]
    items = [item for batch in batches for item in batch.items]
    assert len(items) == stats.items_pushed
    assert {item.meta["policy_version"] for item in items} == {3}
    group_to_batch = {}
    for number, batch in enumerate(batches):
        meta = batch.meta
        rollout_ids = {item.meta["rollout_id"] for item in batch.items}
        assert meta["source"] == "pipeline_redis" and meta["num_messages"] == 1
        assert meta["num_samples"] == len(batch.items)
        assert meta["num_rollouts"] == len(rollout_ids) == 2 * GROUP_SIZE  # distinct rollouts, not items
        assert meta["policy_version_min"] == meta["policy_version_max"] == 3
        assert meta["actor_ids"] == [actor.actor_id]
        assert meta["num_failed_episodes"] == 0 and meta["message_age_s_max"] >= 0
        for item in batch.items:
            assert group_to_batch.setdefault(item.meta["group_id"], number) == number
    # GRPO groups arrive whole: every group has all its rollouts in one batch.
    for batch in batches:
        per_group: dict[str, set[str]] = {}
        for item in batch.items:
            per_group.setdefault(item.meta["group_id"], set()).add(item.meta["rollout_id"])
        assert all(len(r) == GROUP_SIZE for r in per_group.values())
    # Multi-turn episodes: more items than rollouts, so counting items would be wrong.
    assert sum(len(b.items) for b in batches) > sum(b.meta["num_rollouts"] for b in batches)
    assert await raw_llen(redis_url, queue_key) == 0


def with_meta(item: Any, **meta: Any) -> Any:
    return attrs.evolve(item, meta={**item.meta, **meta})


@pytest.mark.redis
async def test_batch_meta_counts_rollouts_and_lengths_across_messages(redis_url: str, queue_key: str) -> None:
    first = (
        with_meta(make_item(0, rollout="a"), total_reward=1.0, completion_length=10, prompt_length=30),
        with_meta(make_item(1, rollout="b"), total_reward=True, completion_length=20, prompt_length=40),
    )
    second = (
        # Rollout "a" again (a later turn): its reward counts once, the first seen.
        with_meta(make_item(2, rollout="a"), total_reward=0.0, completion_length=30, prompt_length=50),
        make_item(3, rollout="c"),  # no recorded lengths: counted from the mask (2 actions of 4)
    )
    await raw_rpush(
        redis_url,
        queue_key,
        *(
            encode_message(BatchMessage(items=items, actor_id=actor, batch_index=0, created_at=0.0))
            for items, actor in ((first, "x"), (second, "w"))
        ),
    )
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=4, wait_timeout_s=5) as source:
        meta = (await source.next_batch()).meta
    assert meta["num_messages"] == 2 and meta["num_samples"] == 4 and meta["actor_ids"] == ["w", "x"]
    assert meta["num_rollouts"] == 3  # a, b, c
    # a: 1.0 (its first reward), b: a bool is no reward, c: 1.0 (make_item(3)'s)
    assert meta["avg_total_reward"] == 1.0
    assert meta["avg_completion_length"] == (10 + 20 + 30 + 2) / 4
    assert meta["avg_prompt_length"] == (30 + 40 + 50 + 2) / 4
    assert meta["policy_version_min"] == meta["policy_version_max"] == 0


@pytest.mark.redis
async def test_source_collects_whole_messages_up_to_min_items(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, *(encode_message(message(3, batch_index=i)) for i in range(3)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=5, wait_timeout_s=5) as source:
        batch = await source.next_batch()
    assert len(batch.items) == 6 and batch.meta["num_messages"] == 2  # two whole messages, never a split
    assert batch.meta["queue_len_after"] == 1


@pytest.mark.redis
async def test_actor_tags_items_with_the_version_it_read(redis_url: str, queue_key: str) -> None:
    versions = FlakyVersions(5, failures=1)
    actor = make_actor(
        redis_url, queue_key, chat_version=None, version_source=versions, groups=1, version_deadline_s=5
    )
    stats = await actor.run(max_batches=1)
    assert versions.calls == 2  # one transient failure, retried
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=1, wait_timeout_s=5) as source:
        batch = await source.next_batch()
    assert stats.items_tagged_by_actor == len(batch.items) > 0
    assert {item.meta["policy_version"] for item in batch.items} == {5}


@pytest.mark.redis
async def test_actor_without_versions_refuses_to_push_untagged_items(redis_url: str, queue_key: str) -> None:
    chat = SeededChatClient(["1", "2"])  # reports no version
    source = RolloutBatchSource(
        engine=guess_engine(chat),
        requests=grpo_requests(1),
        credit_assigner=GroupNormalizedReturn(GROUP_SIZE),
        settings=RolloutSettings(max_steps=2),
    )
    actor = RedisPipelineActor(source, redis_url=redis_url, queue_key=queue_key, client=None)
    with pytest.raises(DataError, match="has no policy_version"):
        await actor.run(max_batches=1)
    assert await raw_llen(redis_url, queue_key) == 0


@pytest.mark.redis
async def test_version_failure_stops_the_actor_before_anything_is_pushed(
    redis_url: str, queue_key: str
) -> None:
    actor = make_actor(
        redis_url,
        queue_key,
        version_source=FlakyVersions(1, failures=10**6),
        version_timeout_s=0.05,
        version_deadline_s=0.2,
    )
    with pytest.raises(TransportError, match="Refusing to guess"):
        await actor.run(max_batches=1)
    assert actor.stats.batches_pushed == 0
    assert await raw_llen(redis_url, queue_key) == 0


@pytest.mark.redis
async def test_backpressure_holds_the_actor_until_the_learner_consumes(
    redis_url: str, queue_key: str
) -> None:
    actor = make_actor(redis_url, queue_key, groups=1, max_queue_len=2)
    task = asyncio.create_task(actor.run(max_batches=4))
    for _ in range(200):  # wait (bounded) for the queue to fill up
        if actor.stats.backpressure_waits:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert actor.stats.backpressure_waits >= 1
    assert actor.stats.batches_pushed == 2 and await raw_llen(redis_url, queue_key) == 2
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=1, wait_timeout_s=5) as source:
        for _ in range(4):
            await source.next_batch()
    stats = await asyncio.wait_for(task, 10)
    assert stats.batches_pushed == 4 and stats.backpressure_wait_s > 0


@pytest.mark.redis
async def test_backpressure_times_out_naming_the_queue(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, encode_message(message()))
    actor = make_actor(redis_url, queue_key, max_queue_len=1, backpressure_timeout_s=0.3)
    with pytest.raises(LudicTimeoutError, match=rf"queue '{queue_key}'.*max_queue_len=1.*not consuming"):
        await actor.run(max_batches=1)


@pytest.mark.redis
async def test_stop_event_ends_a_waiting_actor_cleanly(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, encode_message(message()))
    actor = make_actor(redis_url, queue_key, max_queue_len=1)
    stop = asyncio.Event()
    task = asyncio.create_task(actor.run(stop_event=stop))
    await asyncio.sleep(0.2)
    stop.set()
    stats = await asyncio.wait_for(task, 2)
    assert stats.batches_pushed == 0 and stats.backpressure_waits == 1
    assert actor._redis is None  # the connection run() opened is closed


@pytest.mark.redis
async def test_learner_timeout_is_clear_and_loses_nothing(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, encode_message(message(2)))
    source = RedisBatchSource(
        redis_url, queue_key=queue_key, min_items=4, poll_timeout_s=0.1, wait_timeout_s=0.4
    )
    with pytest.raises(LudicTimeoutError, match=rf"for 4 items on queue '{queue_key}'.*got 2.*kept"):
        await source.next_batch()
    await raw_rpush(redis_url, queue_key, encode_message(message(2, batch_index=1)))
    batch = await source.next_batch()
    assert len(batch.items) == 4 and batch.meta["num_messages"] == 2
    await source.aclose()


@pytest.mark.redis
async def test_malformed_message_raises_and_is_dead_lettered(redis_url: str, queue_key: str) -> None:
    bad = pickle.dumps(["anything"])
    await raw_rpush(redis_url, queue_key, encode_message(message(2)), bad, encode_message(message(2)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=4, wait_timeout_s=5) as source:
        with pytest.raises(DataError, match=rf"malformed message on queue '{queue_key}'.*not valid msgpack"):
            await source.next_batch()
        assert source.num_malformed == 1
        batch = await source.next_batch()  # the good messages around it are all served
    assert len(batch.items) == 4
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    assert await client.lrange(f"{queue_key}:dead", 0, -1) == [bad]
    await client.aclose()


@pytest.mark.redis
async def test_dead_letter_mode_counts_and_continues(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, b"{}", encode_message(message(3)))
    async with RedisBatchSource(
        redis_url, queue_key=queue_key, min_items=3, wait_timeout_s=5, on_malformed="dead_letter"
    ) as source:
        batch = await source.next_batch()
    assert len(batch.items) == 3 and batch.meta["num_malformed_messages"] == 1
    assert await raw_llen(redis_url, f"{queue_key}:dead") == 1


@pytest.mark.redis
async def test_an_old_json_message_is_dead_lettered_saying_why(redis_url: str, queue_key: str) -> None:
    old = json.dumps({"format": "ludic.pipeline.batch", "wire_version": 1, "items": []}).encode()
    await raw_rpush(redis_url, queue_key, old, encode_message(message(2)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=2, wait_timeout_s=5) as source:
        with pytest.raises(DataError, match=r"wire_version 1 \(JSON\) is not supported"):
            await source.next_batch()
        assert len((await source.next_batch()).items) == 2
    assert await raw_llen(redis_url, f"{queue_key}:dead") == 1


async def command_calls(redis_url: str, *commands: str) -> int:
    """How many times the server ran these commands so far (INFO commandstats)."""
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    stats = await client.info("commandstats")
    await client.aclose()
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in commands)


def batch_indices(batch: SAWBatch, per_message: int) -> list[int]:
    """The batch_index of each message of a learner batch (message(i) items are r0, r1, ...)."""
    return [int(item.meta["batch_index"]) for item in batch.items[::per_message]]


def indexed(n_items: int, batch_index: int) -> BatchMessage:
    items = tuple(
        attrs.evolve(make_item(i), meta={**make_item(i).meta, "batch_index": batch_index})
        for i in range(n_items)
    )
    return BatchMessage(items=items, actor_id="a", batch_index=batch_index, created_at=0.0)


@pytest.mark.redis
async def test_source_pops_several_messages_per_round_trip(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in range(8)))
    before = await command_calls(redis_url, "lmove", "blmove")
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=6, wait_timeout_s=5) as source:
        first = await source.next_batch()
        second = await source.next_batch()
    # The same whole messages, in the same order, as popping one at a time...
    assert batch_indices(first, 2) == [0, 1, 2] and batch_indices(second, 2) == [3, 4, 5]
    assert first.meta["queue_len_after"] == 5 and second.meta["queue_len_after"] == 2
    # ...claimed in 3 round trips (1 message: the size is unknown, then 2, then 3), one LMOVE per
    # message and none beyond what the batches need.
    assert await command_calls(redis_url, "lmove", "blmove") - before == 6
    assert await raw_llen(redis_url, queue_key) == 2


@pytest.mark.redis
async def test_a_waiting_claim_is_one_blmove_with_its_llen(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, encode_message(indexed(2, 0)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=2, wait_timeout_s=5) as source:
        await source.next_batch()  # reads the positions (once per source) and learns the message size
        before = await command_calls(redis_url, "lmove", "blmove", "llen")
        waiting = asyncio.create_task(source.next_batch())
        await asyncio.sleep(0.2)  # the claim now waits on the empty queue
        await raw_rpush(redis_url, queue_key, encode_message(indexed(2, 1)), encode_message(indexed(2, 2)))
        batch = await waiting
        assert batch_indices(batch, 2) == [1] and batch.meta["queue_len_after"] == 1
        # The claim that waited took the message and read the queue length in the same round trip:
        # one BLMOVE and one LLEN, no LMOVE tried first on the empty queue, no LLEN after it.
        assert await command_calls(redis_url, "lmove", "blmove", "llen") - before == 2
        assert batch_indices(await source.next_batch(), 2) == [2]


async def clients_in(redis_url: str, command: str) -> set[int]:
    """The ids of the clients the server is running ``command`` for (blocked in it)."""
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    ids = {int(c["id"]) for c in await client.client_list() if c.get("cmd") == command}
    await client.aclose()
    return ids


async def kill_clients(redis_url: str, ids: set[int]) -> None:
    """Drop these clients' connections (CLIENT KILL ID), as a restarted proxy would; other clients of
    a shared test server are left alone."""
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url)
    for client_id in ids:
        await client.execute_command("CLIENT", "KILL", "ID", client_id)
    await client.aclose()


@pytest.mark.redis
async def test_a_claim_cancelled_while_waiting_loses_nothing_and_the_next_works(
    redis_url: str, queue_key: str
) -> None:
    await raw_rpush(redis_url, queue_key, encode_message(indexed(2, 0)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=2, wait_timeout_s=5) as source:
        assert batch_indices(await source.next_batch(), 2) == [0]
        waiting = asyncio.create_task(source.next_batch())
        await asyncio.sleep(0.2)  # the claim waits in BLMOVE on the empty queue
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in (1, 2)))
        # The cancelled claim's connection was dropped (its reply can never be read): the next claim
        # reconnects and gets every message, in order.
        assert batch_indices(await source.next_batch(), 2) == [1]
        assert batch_indices(await source.next_batch(), 2) == [2]
    assert await raw_llen(redis_url, f"{queue_key}:processing:learner-0") == 3


@pytest.mark.redis
async def test_a_claim_whose_connection_is_killed_is_a_transport_error_then_recovers(
    redis_url: str, queue_key: str
) -> None:
    await raw_rpush(redis_url, queue_key, encode_message(indexed(2, 0)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=2, wait_timeout_s=5) as source:
        assert batch_indices(await source.next_batch(), 2) == [0]
        others = await clients_in(redis_url, "blmove")  # of other tests sharing the server, if any
        waiting = asyncio.create_task(source.next_batch())
        await asyncio.sleep(0.2)
        claiming = await clients_in(redis_url, "blmove") - others
        assert len(claiming) == 1
        await kill_clients(redis_url, claiming)
        with pytest.raises(TransportError, match=rf"Redis at {redis_url} failed BLMOVE '{queue_key}'"):
            await waiting
        await raw_rpush(redis_url, queue_key, encode_message(indexed(2, 1)))
        assert batch_indices(await source.next_batch(), 2) == [1]


@pytest.mark.redis
async def test_an_error_reply_to_a_claim_leaves_no_reply_for_the_next(redis_url: str, queue_key: str) -> None:
    import redis.asyncio as redis_asyncio

    from ludic_core.pipeline.claims import ClaimKeys
    from ludic_core.pipeline.connection import PinnedConnection

    client = redis_asyncio.Redis.from_url(redis_url)
    connection = PinnedConnection(client)
    keys = ClaimKeys(queue_key, "c")
    try:
        await client.set(queue_key, b"not a list")
        # BLMOVE, LMOVE and LLEN all fail on a string: the first error is raised, and the replies
        # left unread must not answer the next claim's commands.
        with pytest.raises(redis_asyncio.ResponseError, match="WRONGTYPE"):
            await keys.claim(connection, 2, 0.1)
        await client.delete(queue_key)
        await client.rpush(queue_key, b"m0", b"m1", b"m2")
        assert await keys.claim(connection, 2, 0.1) == ([b"m0", b"m1"], 1)
        assert await keys.claim(connection, 3, 0.1) == ([b"m2"], 0)
        assert await client.lrange(keys.processing, 0, -1) == [b"m0", b"m1", b"m2"]
    finally:
        await connection.aclose()
        await client.delete(keys.processing)
        await client.aclose()


@pytest.mark.redis
async def test_a_push_writes_payloads_given_in_parts(redis_url: str, queue_key: str) -> None:
    import redis.asyncio as redis_asyncio

    from ludic_core.pipeline.connection import PinnedConnection

    client = redis_asyncio.Redis.from_url(redis_url)
    connection = PinnedConnection(client)
    column = b"0123456789"
    try:
        # A message's parts (views of its columns among them) go out as they are, one bulk each.
        payloads = [[b"ab", memoryview(column)[2:5]], [b""], [b"x" * 70_000, b"y"]]
        assert await connection.push(queue_key, payloads) == 3
        assert await connection.push(queue_key, [[b"z"]]) == 4
        assert connection._packed == {}
        assert await client.lrange(queue_key, 0, -1) == [b"ab234", b"", b"x" * 70_000 + b"y", b"z"]
    finally:
        await connection.aclose()
        await client.delete(queue_key)
        await client.aclose()


@pytest.mark.redis
async def test_pushed_payloads_are_packed_for_their_call_only(redis_url: str, queue_key: str) -> None:
    import redis.asyncio as redis_asyncio

    from ludic_core.pipeline.connection import PinnedConnection

    client = redis_asyncio.Redis.from_url(redis_url)
    connection = PinnedConnection(client)
    try:
        # A push's payloads are new every time: keeping their packed bytes would only hold memory.
        assert await connection.execute((("RPUSH", queue_key, b"a", b"b"),), keep_packed=False) == [2]
        assert connection._packed == {}
        assert await connection.execute((("LLEN", queue_key),)) == [2]
        assert list(connection._packed) == [(("LLEN", queue_key),)]  # a command sent again stays packed
        assert await client.lrange(queue_key, 0, -1) == [b"a", b"b"]
    finally:
        await connection.aclose()
        await client.delete(queue_key)
        await client.aclose()


@pytest.mark.redis
async def test_messages_popped_ahead_are_served_next_in_order(redis_url: str, queue_key: str) -> None:
    # Sizes 1, 4, 4, 4 with min_items=5: after the 1-item message the source asks for 4 messages
    # (enough if they held 1 item each), gets the other three and keeps two for the next call.
    sizes = [1, 4, 4, 4]
    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(n, i)) for i, n in enumerate(sizes)))
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=5, wait_timeout_s=5) as source:
        first = await source.next_batch()
        assert [int(i.meta["batch_index"]) for i in first.items] == [0, 1, 1, 1, 1]
        assert first.meta["num_messages"] == 2 and first.meta["queue_len_after"] == 0
        second = await source.next_batch()  # served from memory: the queue is empty
    assert second.meta["num_messages"] == 2 and batch_indices(second, 4) == [2, 3]


@pytest.mark.redis
async def test_a_malformed_message_in_a_multi_pop_loses_none_of_the_others(
    redis_url: str, queue_key: str
) -> None:
    good = [encode_message(indexed(2, i)) for i in range(3)]
    await raw_rpush(redis_url, queue_key, good[0], good[1], b"\x00garbage", good[2])
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=6, wait_timeout_s=5) as source:
        with pytest.raises(DataError, match="not valid msgpack"):
            await source.next_batch()  # pops 0, then 1 and the garbage together
        batch = await source.next_batch()
    assert batch_indices(batch, 2) == [0, 1, 2]
    assert await raw_llen(redis_url, f"{queue_key}:dead") == 1


@pytest.mark.redis
async def test_actor_pushes_several_messages_in_one_rpush(redis_url: str, queue_key: str) -> None:
    actor = make_actor(redis_url, queue_key)
    async with actor:
        before = await command_calls(redis_url, "rpush")
        await actor.push(*(indexed(2, i) for i in range(3)))
        assert await command_calls(redis_url, "rpush") - before == 1
        bad = indexed(1, 9)
        object.__setattr__(bad.items[0], "weight", math.nan)
        with pytest.raises(DataError, match="weight must be a finite number"):
            await actor.push(indexed(2, 3), bad)  # encoded before sending: nothing is pushed
    assert actor.stats.batches_pushed == 3 and actor.stats.items_pushed == 6
    async with RedisBatchSource(redis_url, queue_key=queue_key, min_items=6, wait_timeout_s=5) as source:
        assert batch_indices(await source.next_batch(), 2) == [0, 1, 2]
    assert await raw_llen(redis_url, queue_key) == 0


@pytest.mark.redis
async def test_dump_prints_queued_and_dead_messages(
    redis_url: str, queue_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ludic_core.pipeline.dump import main as dump

    await raw_rpush(redis_url, queue_key, encode_message(message(2, version=5)))
    await raw_rpush(redis_url, f"{queue_key}:dead", b"\x00garbage")
    assert await asyncio.to_thread(dump, [redis_url, queue_key, "--tokens"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    view = json.loads(line)
    assert view["key"] == queue_key and view["policy_version"] == 5
    assert view["items"][1]["input_ids"] == [5, 6, 8, 8] and view["items"][1]["meta"]["rollout_id"] == "r1"
    assert await asyncio.to_thread(dump, [redis_url, queue_key, "--dead"]) == 0
    assert "not valid msgpack" in json.loads(capsys.readouterr().out)["error"]
    assert await raw_llen(redis_url, queue_key) == 1  # read, not popped


# --- exactly-once delivery -----------------------------------------------------------------------------


async def served_indices(source: RedisBatchSource, batches: int) -> list[int]:
    """The batch_index of each message of the next ``batches`` batches (one message each)."""
    return [int((await source.next_batch()).items[0].meta["batch_index"]) for _ in range(batches)]


def one_message_source(redis_url: str, queue_key: str, **options: Any) -> RedisBatchSource:
    return RedisBatchSource(
        redis_url, queue_key=queue_key, **{"min_items": 2, "wait_timeout_s": 5, **options}
    )


@pytest.mark.redis
async def test_claims_not_acknowledged_are_delivered_again_after_a_restart(
    redis_url: str, queue_key: str
) -> None:
    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in range(4)))
    first = one_message_source(redis_url, queue_key)
    assert await served_indices(first, 1) == [0]
    checkpoint = first.state_dict()
    first.checkpoint_committed(1)
    assert await served_indices(first, 2) == [1, 2]  # trained into steps the restart discards
    await first.aclose()  # the learner dies here (its acknowledgement of step 1 went out with batch 1)
    assert await raw_llen(redis_url, f"{queue_key}:processing:learner-0") == 2

    second = one_message_source(redis_url, queue_key)
    second.load_state_dict(checkpoint)
    assert await served_indices(second, 3) == [1, 2, 3]  # again, in order, then the queue's next
    assert second.num_redelivered == 2
    await second.aclose()


@pytest.mark.redis
async def test_a_kill_between_checkpoint_and_acknowledgement_delivers_nothing_twice(
    redis_url: str, queue_key: str
) -> None:
    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in range(3)))
    first = one_message_source(redis_url, queue_key)
    assert await served_indices(first, 2) == [0, 1]
    checkpoint = first.state_dict()  # written, then the learner dies before checkpoint_committed
    await first.aclose()
    second = one_message_source(redis_url, queue_key)
    second.load_state_dict(checkpoint)
    assert await served_indices(second, 1) == [2]
    await second.aclose()
    assert await raw_llen(redis_url, f"{queue_key}:processing:learner-0") == 1  # only message 2


@pytest.mark.redis
async def test_an_acknowledgement_is_one_transaction_that_finds_lost_claims(
    redis_url: str, queue_key: str
) -> None:
    import redis.asyncio as redis_asyncio

    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in range(4)))
    source = one_message_source(redis_url, queue_key, keep_trained_messages=1)
    assert await served_indices(source, 2) == [0, 1]
    source.checkpoint_committed(2)
    sent: list[tuple[Any, ...]] = []
    assert source._claims is not None
    execute = source._claims.execute

    async def recording(commands: tuple[Any, ...], **options: Any) -> list[Any]:
        sent.append(commands)
        return await execute(commands, **options)

    source._claims.execute = recording  # type: ignore[method-assign]
    assert await served_indices(source, 1) == [2]
    processing, trained = f"{queue_key}:processing:learner-0", f"{queue_key}:trained:learner-0"
    # The acknowledgement (no read before it) and the claim: two round trips.
    assert [c[0] for c in sent[0]] == ["MULTI", "LMOVE", "LMOVE", "LTRIM", "SET", "EXEC"]
    assert len(sent) == 2 and sent[1][0][0] == "BLMOVE"
    client = redis_asyncio.Redis.from_url(redis_url)
    assert await client.get(f"{queue_key}:acked:learner-0") == b"2"
    assert await client.llen(trained) == 1 and await client.llen(processing) == 1
    # An acknowledgement is never sent twice (its position moves): it is not kept packed.
    assert [commands[0][0] for commands in source._claims._packed] == ["BLMOVE"]

    source.checkpoint_committed(3)
    await client.delete(processing)  # Redis restarted without its append-only file
    with pytest.raises(DataError, match=r"found 0 of the 1 claimed messages .* Redis lost writes"):
        await source.next_batch()
    assert await client.get(f"{queue_key}:acked:learner-0") == b"3"  # trained: nothing to move back
    await source.aclose()
    await client.aclose()


@pytest.mark.redis
async def test_resuming_an_older_checkpoint_requeues_what_later_steps_trained(
    redis_url: str, queue_key: str
) -> None:
    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in range(5)))
    first = one_message_source(redis_url, queue_key, keep_trained_messages=2)
    states = []
    for step in (1, 2, 3):
        await first.next_batch()
        states.append(first.state_dict())
        first.checkpoint_committed(step)
    await first.aclose()  # acknowledges step 3: messages 0-2 are trained and acknowledged
    assert await raw_llen(redis_url, f"{queue_key}:processing:learner-0") == 0

    second = one_message_source(redis_url, queue_key, keep_trained_messages=2)
    second.load_state_dict(states[0])  # back to step 1: steps 2 and 3 are discarded
    assert await served_indices(second, 3) == [1, 2, 3]
    await second.aclose()

    third = one_message_source(redis_url, queue_key, keep_trained_messages=2)
    third.load_state_dict({**states[0], "consumed": 0})  # further back than the 2 messages kept
    with pytest.raises(DataError, match=r"re-deliver 1 trained messages but .* keeps only 0"):
        await third.next_batch()
    await third.aclose()


@pytest.mark.redis
async def test_learners_with_their_own_consumer_names_share_a_queue(redis_url: str, queue_key: str) -> None:
    await raw_rpush(redis_url, queue_key, *(encode_message(indexed(2, i)) for i in range(12)))
    sources = [one_message_source(redis_url, queue_key, consumer=f"rank{r}") for r in range(3)]
    served = await asyncio.gather(*(served_indices(source, 4) for source in sources))
    for source in sources:
        await source.aclose()
    assert sorted(i for indices in served for i in indices) == list(range(12))  # each exactly once
    for rank, indices in enumerate(served):
        assert indices == sorted(indices)
        assert await raw_llen(redis_url, f"{queue_key}:processing:rank{rank}") == 4


@pytest.mark.redis
async def test_messages_newer_than_the_learner_are_dead_lettered_once_with_the_reason(
    redis_url: str, queue_key: str
) -> None:
    import redis.asyncio as redis_asyncio

    versions = [1, 5, 2]
    await raw_rpush(redis_url, queue_key, *(encode_message(message(2, version=v)) for v in versions))
    first = one_message_source(redis_url, queue_key, min_items=4, current_version=lambda: 2)
    checkpoint = first.state_dict()
    batch = await first.next_batch()
    assert [i.meta["policy_version"] for i in batch.items] == [1, 1, 2, 2]
    assert batch.meta["num_future_messages"] == 1 and first.num_future == 1
    await first.aclose()
    second = one_message_source(redis_url, queue_key, min_items=4, current_version=lambda: 2)
    second.load_state_dict(checkpoint)  # the whole batch again: the newer message stays a dead letter
    assert [i.meta["policy_version"] for i in (await second.next_batch()).items] == [1, 1, 2, 2]
    assert second.num_future == 0
    await second.aclose()
    client = redis_asyncio.Redis.from_url(redis_url)
    (dead,) = await client.lrange(f"{queue_key}:dead", 0, -1)
    await client.aclose()
    letter = decode_message(dead)
    assert letter.policy_version == 5
    assert "policy_version 5 is newer than the learner's version 2" in letter.meta["dead_letter_reason"]


@pytest.mark.redis
async def test_a_checkpoint_of_another_consumer_or_queue_is_refused(redis_url: str, queue_key: str) -> None:
    state = one_message_source(redis_url, queue_key, consumer="rank0").state_dict()
    with pytest.raises(DataError, match="consumer is 'rank0' but this source's is 'rank1'"):
        one_message_source(redis_url, queue_key, consumer="rank1").load_state_dict(state)
    with pytest.raises(DataError, match="not a RedisBatchSource state"):
        one_message_source(redis_url, queue_key).load_state_dict({"position": 3})
    with pytest.raises(DataError, match="consumed must be an int >= 0, got -1"):
        one_message_source(redis_url, queue_key, consumer="rank0").load_state_dict({**state, "consumed": -1})


async def test_unreachable_redis_is_a_transport_error() -> None:
    source = RedisBatchSource(f"redis://127.0.0.1:{free_loopback_port()}/0", min_items=1, connect_timeout_s=1)
    with pytest.raises(TransportError, match=r"Redis at redis://127\.0\.0\.1:\d+/0 failed PING"):
        await source.next_batch()


def test_bad_configuration_names_the_field() -> None:
    with pytest.raises(ConfigError, match="min_items must be an int >= 1, got 0"):
        RedisBatchSource("redis://127.0.0.1:1/0", min_items=0)
    with pytest.raises(ConfigError, match="on_malformed"):
        RedisBatchSource("redis://127.0.0.1:1/0", min_items=1, on_malformed="skip")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_queue_len must be an int >= 1 or None, got 0"):
        make_actor("redis://127.0.0.1:1/0", "q", max_queue_len=0)
    for field in ("wait_timeout_s", "poll_timeout_s", "connect_timeout_s"):
        for value in (math.nan, math.inf, 0, True):
            with pytest.raises(ConfigError, match=rf"RedisBatchSource\.{field} must be a finite number > 0"):
                RedisBatchSource("redis://127.0.0.1:1/0", min_items=1, **{field: value})
    with pytest.raises(ConfigError, match=r"backpressure_timeout_s must be a finite number > 0, got nan"):
        make_actor("redis://127.0.0.1:1/0", "q", backpressure_timeout_s=math.nan)


def test_local_server_without_a_binary_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from ludic_core.pipeline import local_server

    monkeypatch.setattr(local_server, "find_redis_server", lambda: None)
    with (
        pytest.raises(local_server.RedisServerNotFound, match="apt-get install redis-server"),
        local_server.local_redis_server(),
    ):
        pass


def test_local_server_that_cannot_start_reports_its_log(tmp_path: Any) -> None:
    from ludic_core.pipeline.local_server import local_redis_server

    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: cannot bind' >&2\nexit 1\n")
    fake.chmod(0o755)
    with (
        pytest.raises(LudicTimeoutError, match="FATAL: cannot bind"),
        local_redis_server(binary=str(fake), startup_timeout_s=2),
    ):
        pass
