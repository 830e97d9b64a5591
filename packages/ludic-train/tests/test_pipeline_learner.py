"""The Redis pipeline feeding ludic-train's Trainer: a live actor and learner, and the wire's float32
logprobs giving the trainer the same tensors (the pipeline itself is tested in ludic-core)."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from ludic_core import RolloutBatchSource, RolloutSettings
from ludic_core.algorithms import AlgorithmSpec, grpo
from ludic_core.engine import RolloutEngine
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.pipeline import (
    BatchMessage,
    RedisBatchSource,
    RedisPipelineActor,
    decode_message,
    encode_message,
    run_pipeline_actor,
)
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWItem
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient
from ludic_core.testing.redis import queue_key_for_tests, redis_url_for_tests
from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.collate import collate_saw_items
from ludic_train.config import TrainerConfig
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

GROUP_SIZE = 4
INFERENCE = InferenceSpec(sampling=SamplingParams(max_tokens=4), return_=ReturnSpec.for_rl())


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    yield from redis_url_for_tests()


@pytest.fixture
async def queue_key(redis_url: str) -> AsyncIterator[str]:
    async for key in queue_key_for_tests(redis_url):
        yield key


def guess_engine(client: SeededChatClient) -> RolloutEngine:
    """GuessNumber (secret in 1..4, two guesses): episodes of one or two turns, rewards 0 or 1."""
    return RolloutEngine(
        env_factories={"guess": lambda: GuessNumberEnv(max_number=4, max_guesses=2)},
        protocol_factories={
            "scripted": lambda: SingleAgentProtocol(ScriptedAgent(client, inference=INFERENCE))
        },
    )


def grpo_requests(groups: int) -> Any:
    def requests(step: int) -> list[RolloutRequest]:
        base = RolloutRequest(env=EnvSpec("guess"), protocol=ProtocolSpec("scripted"), inference=INFERENCE)
        strategy = GRPORequestStrategy(group_size=GROUP_SIZE, seed=derive_seed(0, "groups", step))
        return strategy.expand([base] * groups)

    return requests


def rollout_source(client: SeededChatClient, algorithm: AlgorithmSpec) -> RolloutBatchSource:
    """One GRPO group of GuessNumber episodes per batch, credited by ``algorithm``."""
    return RolloutBatchSource(
        engine=guess_engine(client),
        requests=grpo_requests(1),
        credit_assigner=algorithm.credit_assigner,
        settings=RolloutSettings(max_steps=3),
    )


class VersionBoard:
    """The trainer's publisher and the actor's version source in one (weights are not moved: the
    scripted sampler has none), so the actor tags data with the trainer's latest published step."""

    shares_trainer_weights = True

    def __init__(self) -> None:
        self.version = 0
        self.published: list[int] = []

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        self.version = version
        self.published.append(version)

    async def aclose(self) -> None:
        return None

    async def get_policy_version(self) -> int:
        return self.version


def agentic_batch(rng: random.Random, *, items: int, tokens: int) -> BatchMessage:
    """A GRPO-like batch of a 151k-vocabulary model: 40% action tokens with logprobs."""
    out = []
    for i in range(items):
        actions = int(tokens * 0.4)
        out.append(
            SAWItem(
                input_ids=[rng.randrange(151_643) for _ in range(tokens)],
                action_mask=[0] * (tokens - actions) + [1] * actions,
                weight=rng.gauss(0, 1),
                actor_logps=[math.log(rng.uniform(0.01, 1.0)) for _ in range(actions)],
                meta={"rollout_id": f"r{i // 2}", "group_id": "g0", "policy_version": 3},
            )
        )
    return BatchMessage(items=tuple(out), actor_id="host:1:abc", batch_index=0, created_at=1.7e9)


def test_float32_logprobs_give_the_trainer_the_same_tensors() -> None:
    rng = random.Random(1)
    batch = agentic_batch(rng, items=4, tokens=64)
    batch = BatchMessage(
        items=tuple(attrs.evolve(i, teacher_logps=[v / 3 for v in i.actor_logps]) for i in batch.items),
        actor_id="a",
        batch_index=0,
        created_at=0.0,
    )
    sent = collate_saw_items(batch.items, pad_token_id=0)
    received = collate_saw_items(decode_message(encode_message(batch)).items, pad_token_id=0)
    # Collation makes float32 tensors of the logprobs: rounding them on the wire first changes nothing.
    assert sent.keys() == received.keys() and "teacher_logps" in sent
    for key, tensor in sent.items():
        assert torch.equal(tensor, received[key]), key


@pytest.mark.redis
async def test_actor_and_trainer_run_concurrently_and_stale_items_are_dropped(
    redis_url: str, queue_key: str
) -> None:
    board = VersionBoard()
    algorithm = grpo(group_size=GROUP_SIZE)
    chat = SeededChatClient(["1", "2", "3", "4"], latency_s=0.005)

    def actor() -> RedisPipelineActor:
        return RedisPipelineActor(
            rollout_source(chat, algorithm),
            redis_url=redis_url,
            queue_key=queue_key,
            client=board,  # type: ignore[arg-type]  # a version source: the chat client reports none
            max_queue_len=4,
        )

    # Four batches generated with version 0 wait in the queue before the learner starts.
    await run_pipeline_actor(
        rollout_source(chat, algorithm),
        redis_url=redis_url,
        queue_key=queue_key,
        client=board,
        max_batches=4,
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


@pytest.mark.redis
async def test_a_restarted_trainer_retrains_exactly_the_discarded_steps_and_never_stops_on_newer_data(
    redis_url: str, queue_key: str, tmp_path: Path
) -> None:
    import redis.asyncio as redis_asyncio

    board = VersionBoard()
    algorithm = grpo(group_size=GROUP_SIZE)
    chat = SeededChatClient(["1", "2", "3", "4"])

    async def push(batches: int, version: int) -> None:
        board.version = version
        await run_pipeline_actor(
            rollout_source(chat, algorithm),
            redis_url=redis_url,
            queue_key=queue_key,
            client=board,
            max_batches=batches,
        )

    # Four batches of version 0; then one sampled by weights of step 5 of a continuation a resume will
    # discard; then one more of version 0.
    await push(4, 0)
    await push(1, 5)
    await push(1, 0)

    def trainer() -> tuple[Trainer, RedisBatchSource]:
        source = RedisBatchSource(
            redis_url, queue_key=queue_key, min_items=1, wait_timeout_s=10, current_version=lambda: run.step
        )
        run = Trainer(
            model=tiny_causal_lm(bpe_tokenizer(), seed=0),
            algorithm=algorithm,
            batch_source=source,
            config=TrainerConfig(
                pad_token_id=0,
                device="cpu",
                lr=1e-3,
                max_seq_len=128,
                micro_token_budget=512,
                publish_every_steps=1,
            ),
            publisher=board,
            checkpointer=CheckpointManager(CheckpointConfig(tmp_path, every_n_steps=2)),
            resume_from="latest",
        )
        return run, source

    first, first_source = trainer()
    await asyncio.wait_for(first.train(3), 30)  # checkpoint at step 2; step 3 is lost with the learner
    await first_source.aclose()
    board.published.clear()

    second, second_source = trainer()
    assert second.step == 2
    await asyncio.wait_for(second.train(3), 30)
    await second_source.aclose()
    assert board.published[0] == 2  # the resumed weights go out before the first step
    assert second.step == 5
    assert second_source.num_redelivered == 1  # step 3's batch, trained again
    assert second_source.num_future == 1 and second_source.num_messages == 3
    client = redis_asyncio.Redis.from_url(redis_url)
    (dead,) = await client.lrange(f"{queue_key}:dead", 0, -1)
    left = await client.llen(queue_key)
    await client.aclose()
    assert "newer than the learner's version 4" in decode_message(dead).meta["dead_letter_reason"]
    assert left == 0


# The learning run through the pipeline: the toy digits task (toy_rl), GRPO at lr 1e-2, the actor on its
# own copy of the model loading the learner's published weights between batches (DirectoryWeights, as
# the pipeline recipes do). Learner's mean batch reward, last 5 of 20 steps minus the first 5, must
# exceed the margin that test_learning.py's zero-credit control stays well below.
LEARN_STEPS = 20
LEARN_WINDOW = 5
LEARN_MARGIN = 0.2


@pytest.mark.redis
@pytest.mark.slow  # ~20 s: 20 steps of sampling and training on 2 CPU cores
async def test_pipeline_actor_and_learner_raise_the_reward(
    redis_url: str, queue_key: str, tmp_path: Path
) -> None:
    from toy_rl import make_online_source

    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.recipes.weight_files import DirectoryWeights

    tokenizer = bpe_tokenizer()
    algorithm = grpo(group_size=8)
    actor_model = tiny_causal_lm(tokenizer, seed=0)
    sampler = LocalPolicyClient(
        actor_model, tokenizer, batch_window_s=0.02, max_batch_size=256, initial_version=0
    )
    weights = DirectoryWeights(tmp_path / "weights")

    async def load_new_weights(_step: int) -> None:
        await weights.apply_latest(actor_model, sampler)

    actor = RedisPipelineActor(
        make_online_source(tokenizer, sampler, algorithm, group_size=8, groups_per_step=4),
        redis_url=redis_url,
        queue_key=queue_key,
        client=sampler,
        max_queue_len=2,
        before_batch=load_new_weights,
    )
    stop = asyncio.Event()
    actor_task = asyncio.create_task(actor.run(stop_event=stop))
    source = RedisBatchSource(
        redis_url, queue_key=queue_key, min_items=32, wait_timeout_s=60, current_version=lambda: trainer.step
    )
    trainer = Trainer(
        model=tiny_causal_lm(tokenizer, seed=0),
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tokenizer, device="cpu", lr=1e-2, max_lag=1, max_seq_len=128, micro_token_budget=4096
        ),
        publisher=weights,
    )
    try:
        await trainer.publish()
        results = await asyncio.wait_for(trainer.train(LEARN_STEPS), 240)
    finally:
        stop.set()
        await asyncio.wait_for(actor_task, 60)
        await source.aclose()
        await sampler.aclose()
    rewards = [r["train/avg_total_reward"] for r in results]
    before = sum(rewards[:LEARN_WINDOW]) / LEARN_WINDOW
    after = sum(rewards[-LEARN_WINDOW:]) / LEARN_WINDOW
    print(f"pipeline digits: mean reward {before:.3f} -> {after:.3f}")
    assert after - before >= LEARN_MARGIN, [round(r, 3) for r in rewards]
    assert all(r["train/policy_lag_max"] <= 1 for r in results)
    assert weights.applied  # the actor sampled from the learner's weights
