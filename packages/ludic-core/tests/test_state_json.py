"""Every ``state_dict`` in ludic-core is plain JSON and resumes exactly after a JSON round trip."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from core_data_builders import guess_engine

from ludic_core import RolloutSettings
from ludic_core.batch_sources import OfflineBatchSource, RolloutBatchSource
from ludic_core.credit import GroupNormalizedReturn, MonteCarloReturn
from ludic_core.curriculum import MixtureCurriculum, SequenceRequests
from ludic_core.errors import ConfigError
from ludic_core.inference import InferenceSpec, ReturnSpec
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.strategies import GRPORequestStrategy


def guess(**meta: Any) -> RolloutRequest:
    return RolloutRequest(
        EnvSpec("guess", {"max_number": 5}),
        ProtocolSpec("single"),
        inference=InferenceSpec(return_=ReturnSpec.for_rl()),
        meta=meta,
    )


async def grpo_next(strategy: GRPORequestStrategy) -> Any:
    return [(r.env_seed, r.sampling_seed, r.meta) for r in strategy.expand([guess(), guess()])]


async def engine_next(engine: Any) -> Any:
    result = await engine.generate_rollouts([guess()] * 2, RolloutSettings(max_steps=3))
    return [(e.env_seed, e.sampling_seed, [r.total_reward for r in e.rollouts]) for e in result.episodes]


def rollout_source() -> RolloutBatchSource:
    return RolloutBatchSource(
        engine=guess_engine(base_seed=7, deterministic_ids=True),
        credit_assigner=MonteCarloReturn(),
        requests=lambda step: [guess(step=step)] * 2,
        settings=RolloutSettings(max_steps=3),
    )


async def rollout_source_next(source: RolloutBatchSource) -> Any:
    batch = await source.next_batch()
    return batch.meta["step"], [item.to_dict() for item in batch.items]


async def offline_items() -> list[Any]:
    engine = guess_engine(deterministic_ids=True)
    requests = GRPORequestStrategy(2, seed=1).expand([guess()] * 4)
    batch = await engine.generate_batch(
        requests, RolloutSettings(max_steps=3), credit_assigner=GroupNormalizedReturn(group_size=2)
    )
    return list(batch.items)


async def offline_next(source: OfflineBatchSource) -> Any:
    batch = await source.next_batch()
    return batch.meta["epoch"], batch.meta["position"], [item.to_dict() for item in batch.items]


Make = Callable[[], Awaitable[Any]]
Next = Callable[[Any], Awaitable[Any]]


async def _grpo() -> GRPORequestStrategy:
    return GRPORequestStrategy(3, seed=11)


async def _engine() -> Any:
    return guess_engine(base_seed=3)


async def _rollout_source() -> RolloutBatchSource:
    return rollout_source()


async def _offline() -> OfflineBatchSource:
    return OfflineBatchSource(await offline_items(), batch_size=3, seed=4)


def grpo_sequence() -> SequenceRequests:
    # Unseeded base requests: GRPO draws their env and sampling seeds from its own RNG.
    return SequenceRequests(
        samples=[1, 2, 3], build=lambda sample, index: guess(sample=sample), batch_size=2,
        strategy=GRPORequestStrategy(2, seed=5),
    )  # fmt: skip


async def _sequence() -> SequenceRequests:
    return grpo_sequence()


async def _mixture() -> MixtureCurriculum:
    return MixtureCurriculum(
        sources={"guess": lambda rng, step: guess(pick=rng.randrange(9))},
        schedule=lambda step: {"guess": 1.0},
        batch_size=2,
        strategy=GRPORequestStrategy(2, seed=6),
    )


async def curriculum_next(curriculum: Any) -> Any:
    return [(r.env_seed, r.sampling_seed, r.meta) for r in curriculum(1)]


async def _grpo_rollout_source() -> RolloutBatchSource:
    return RolloutBatchSource(
        engine=guess_engine(base_seed=7, deterministic_ids=True),
        credit_assigner=GroupNormalizedReturn(group_size=2),
        requests=grpo_sequence(),
        settings=RolloutSettings(max_steps=3),
    )


CASES: dict[str, tuple[Make, Next]] = {
    "GRPORequestStrategy": (_grpo, grpo_next),
    "RolloutEngine": (_engine, engine_next),
    "RolloutBatchSource": (_rollout_source, rollout_source_next),
    "OfflineBatchSource": (_offline, offline_next),
    "SequenceRequests+GRPO": (_sequence, curriculum_next),
    "MixtureCurriculum+GRPO": (_mixture, curriculum_next),
    "RolloutBatchSource+GRPO": (_grpo_rollout_source, rollout_source_next),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_state_dict_is_json_and_resumes_after_a_json_round_trip(name: str) -> None:
    make, next_output = CASES[name]
    original = await make()
    for _ in range(3):  # advance past the first epoch / several draws
        await next_output(original)
    state = original.state_dict()
    round_tripped = json.loads(json.dumps(state))
    # Equal after the round trip means plain JSON types only: no tuples, no non-str keys.
    assert round_tripped == state
    resumed = await make()
    resumed.load_state_dict(round_tripped)
    for _ in range(2):
        assert await next_output(resumed) == await next_output(original)


def test_grpo_state_with_a_malformed_rng_state_names_the_field() -> None:
    strategy = GRPORequestStrategy(2, seed=0)
    state = strategy.state_dict()
    with pytest.raises(ConfigError, match="rng_state must be"):
        strategy.load_state_dict({**state, "rng_state": [3, "abc", None]})
    # The tuple form that random.getstate() returns is accepted too.
    strategy.load_state_dict({**state, "rng_state": strategy._rng.getstate()})
