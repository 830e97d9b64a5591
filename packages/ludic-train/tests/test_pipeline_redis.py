"""Pipeline RL over a real redis-server: wire format, actor, learner source, and a concurrent run.

Tests marked ``redis`` start a private ``redis-server`` (see ``redis_server.py``) or use
``LUDIC_REDIS_URL``; the wire-format and version-reading tests need no server.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest
from redis_server import redis_url_for_tests

from ludic_core.credit import GroupNormalizedReturn
from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, ProtocolError, TransportError
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWItem
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient
from ludic_train.pipeline import (
    BatchMessage,
    RedisBatchSource,
    RedisPipelineActor,
    decode_message,
    encode_message,
    read_policy_version,
    run_pipeline_actor,
)
from ludic_train.pipeline.local_server import free_loopback_port

GROUP_SIZE = 4
INFERENCE = InferenceSpec(sampling=SamplingParams(max_tokens=4), return_=ReturnSpec.for_rl())


# --- fixtures and builders ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    yield from redis_url_for_tests()


@pytest.fixture
async def queue_key(redis_url: str) -> AsyncIterator[str]:
    """A queue of this test's own (tests may share a LUDIC_REDIS_URL server); deleted afterwards."""
    import redis.asyncio as redis_asyncio

    key = f"ludic-test:{uuid.uuid4().hex[:12]}"
    yield key
    client = redis_asyncio.Redis.from_url(redis_url)
    await client.delete(key, f"{key}:dead")
    await client.aclose()


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
    return RedisPipelineActor(
        engine=guess_engine(chat),
        requests_provider=grpo_requests(options.pop("groups", 2)),
        credit_assigner=GroupNormalizedReturn(GROUP_SIZE),
        redis_url=redis_url,
        queue_key=queue_key,
        client=version_source if version_source is not None else chat,
        max_steps=3,
        **options,
    )


def make_item(i: int, *, version: int | None = 0, rollout: str | None = None) -> SAWItem:
    meta: dict[str, Any] = {"rollout_id": rollout or f"r{i}", "total_reward": float(i % 2)}
    if version is not None:
        meta["policy_version"] = version
    return SAWItem(
        input_ids=[5, 6, 7 + i, 8],
        attention_mask=[1, 1, 1, 1],
        action_mask=[0, 0, 1, 1],
        weight=0.1 * i - 0.3333333333333333,
        meta=meta,
        actor_logps=[-0.5, -1.25 - i / 7],
        sampling_temperature=0.7 if i % 2 else None,
    )


def message(n_items: int = 3, *, version: int = 0, batch_index: int = 0) -> BatchMessage:
    return BatchMessage(
        items=tuple(make_item(i, version=version) for i in range(n_items)),
        actor_id="test-actor",
        batch_index=batch_index,
        created_at=1_700_000_000.25,
        meta={"num_failed_episodes": 0},
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


class VersionBoard:
    """The trainer's publisher and the actor's version source in one (weights are not moved: the
    scripted sampler has none), so the actor tags data with the trainer's latest published step."""

    shares_trainer_weights = True

    def __init__(self) -> None:
        self.version = 0

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        self.version = version

    async def aclose(self) -> None:
        return None

    async def get_policy_version(self) -> int:
        return self.version


# --- wire format (no server) -----------------------------------------------------------------------


def test_message_round_trip_is_exact() -> None:
    original = message(4, version=7, batch_index=11)
    payload = encode_message(original)
    assert isinstance(payload, bytes)
    header = json.loads(payload)
    assert header["format"] == "ludic.pipeline.batch" and header["wire_version"] == 1
    assert header["policy_version"] == 7 and header["num_rollouts"] == 4
    decoded = decode_message(payload)
    assert decoded == original  # floats (weights, logprobs) round-trip bit for bit
    assert [item.sampling_temperature for item in decoded.items] == [None, 0.7, None, 0.7]


def test_policy_version_is_the_oldest_and_rollouts_are_counted_once() -> None:
    items = (
        make_item(0, version=5, rollout="a"),
        make_item(1, version=3, rollout="a"),
        make_item(2, version=4),
    )
    msg = BatchMessage(items=items, actor_id="a", batch_index=0, created_at=0.0)
    assert msg.policy_version == 3
    assert msg.num_rollouts == 2


def test_every_item_needs_a_policy_version() -> None:
    with pytest.raises(DataError, match=r"items\[1\].*policy_version None"):
        BatchMessage(
            items=(make_item(0), make_item(1, version=None)), actor_id="a", batch_index=0, created_at=0.0
        )


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"not json at all", "not valid JSON"),
        (pickle.dumps({"items": []}), "not valid JSON"),  # pickle is refused, never loaded
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({"format": "other"}).encode(), "not a Ludic pipeline message"),
        (
            json.dumps({**message().to_dict(), "wire_version": 2}).encode(),
            "wire_version 2 is not supported",
        ),
        (
            json.dumps({**message().to_dict(), "items": [{"input_ids": [1]}]}).encode(),
            r"items\[0\]: SAWItem data is missing",
        ),
        (
            json.dumps({**message().to_dict(), "policy_version": 9}).encode(),
            "header policy_version=9 disagrees",
        ),
    ],
    ids=["garbage", "pickle", "array", "format", "wire-version", "bad-item", "header"],
)
def test_decode_refuses_malformed_messages_quoting_them(raw: bytes, match: str) -> None:
    with pytest.raises(DataError, match=match) as info:
        decode_message(raw)
    assert f"({len(raw)} bytes)" in str(info.value)  # the excerpt names the message size


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
    with pytest.raises(ProtocolError, match=r"returned -1"):
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
    actor = RedisPipelineActor(
        engine=guess_engine(chat),
        requests_provider=grpo_requests(1),
        credit_assigner=GroupNormalizedReturn(GROUP_SIZE),
        redis_url=redis_url,
        queue_key=queue_key,
        client=None,
        max_steps=2,
    )
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
        with pytest.raises(DataError, match=rf"malformed message on queue '{queue_key}'.*not valid JSON"):
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


async def test_unreachable_redis_is_a_transport_error() -> None:
    source = RedisBatchSource(f"redis://127.0.0.1:{free_loopback_port()}/0", min_items=1, connect_timeout_s=1)
    with pytest.raises(TransportError, match=r"Redis at redis://127\.0\.0\.1:\d+/0 failed PING"):
        await source.next_batch()


def test_bad_configuration_names_the_field() -> None:
    with pytest.raises(ConfigError, match="min_items must be an int >= 1, got 0"):
        RedisBatchSource("redis://127.0.0.1:1/0", min_items=0)
    with pytest.raises(ConfigError, match="on_malformed"):
        RedisBatchSource("redis://127.0.0.1:1/0", min_items=1, on_malformed="skip")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_queue_len must be an int >= 1, got 0"):
        make_actor("redis://127.0.0.1:1/0", "q", max_queue_len=0)


# --- a concurrent actor and learner ------------------------------------------------------------------


@pytest.mark.redis
async def test_actor_and_trainer_run_concurrently_and_stale_items_are_dropped(
    redis_url: str, queue_key: str
) -> None:
    from ludic_train.config import TrainerConfig
    from ludic_train.presets import make_grpo
    from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
    from ludic_train.trainer import Trainer

    board = VersionBoard()
    algorithm = make_grpo(group_size=GROUP_SIZE)
    chat = SeededChatClient(["1", "2", "3", "4"], latency_s=0.005)

    def actor() -> RedisPipelineActor:
        return RedisPipelineActor(
            engine=guess_engine(chat),
            requests_provider=grpo_requests(1),
            credit_assigner=algorithm.credit_assigner,
            redis_url=redis_url,
            queue_key=queue_key,
            client=board,  # type: ignore[arg-type]  # a version source: the chat client reports none
            max_steps=3,
            max_queue_len=4,
        )

    # Four batches generated with version 0 wait in the queue before the learner starts.
    await run_pipeline_actor(
        actor().source.engine,
        grpo_requests(1),
        algorithm.credit_assigner,
        redis_url,
        queue_key=queue_key,
        client=board,
        max_steps=3,
        max_batches=4,  # type: ignore[arg-type]
    )
    live = actor()
    stop = asyncio.Event()
    actor_task = asyncio.create_task(live.run(stop_event=stop))

    source = RedisBatchSource(redis_url, queue_key=queue_key, min_items=1, wait_timeout_s=20)
    trainer = Trainer(
        model=tiny_causal_lm(bpe_tokenizer(), seed=0),
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=0,
            device="cpu",
            lr=1e-3,
            max_lag=1,
            max_seq_len=128,
            micro_token_budget=512,
            publish_every_steps=1,
        ),
        publisher=board,
    )
    try:
        results = await asyncio.wait_for(trainer.train(4), 30)
    finally:
        stop.set()
        await asyncio.wait_for(actor_task, 10)
        await source.aclose()
    assert trainer.step == 4 and board.version == 4
    # Steps 0 and 1 train on prefilled batches 1 and 2 (lag 0 and 1); at step 2 the prefilled batches
    # 3 and 4 lag by 2 > max_lag and are dropped whole before a fresh batch is found.
    assert results[2]["train/stale_items_dropped"] > 0
    assert all(r["train/policy_lag_max"] <= 1 for r in results)
    assert all(r["train/num_samples"] > 0 for r in results)
    assert live.stats.batches_pushed >= 2
    assert live.stats.last_policy_version is not None and live.stats.last_policy_version >= 1


def test_local_server_without_a_binary_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from ludic_train.pipeline import local_server

    monkeypatch.setattr(local_server, "find_redis_server", lambda: None)
    with (
        pytest.raises(local_server.RedisServerNotFound, match="apt-get install redis-server"),
        local_server.local_redis_server(),
    ):
        pass


def test_local_server_that_cannot_start_reports_its_log(tmp_path: Any) -> None:
    from ludic_train.pipeline.local_server import local_redis_server

    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: cannot bind' >&2\nexit 1\n")
    fake.chmod(0o755)
    with (
        pytest.raises(LudicTimeoutError, match="FATAL: cannot bind"),
        local_redis_server(binary=str(fake), startup_timeout_s=2),
    ):
        pass
