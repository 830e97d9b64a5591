from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from core_data_builders import guess_engine

from ludic_core import RolloutSettings
from ludic_core.batch_sources import OfflineBatchSource, RolloutBatchSource
from ludic_core.credit import ConstantCredit, GroupNormalizedReturn, PerStepReward
from ludic_core.curriculum import MixtureCurriculum, SequenceRequests, linear_schedule, piecewise_schedule
from ludic_core.errors import ConfigError, DataError
from ludic_core.filters import (
    any_of,
    apply_filter,
    combine,
    drop_incomplete_completions,
    drop_parse_errors,
    drop_truncated,
    drop_truncated_episodes,
    drop_zero_weight,
    keep_agent_steps,
    keep_all,
    keep_env_steps,
)
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import BatchSource, SAWItem
from ludic_core.saw_io import write_saw_jsonl
from ludic_core.strategies import GRPORequestStrategy


def item(weight: float = 1.0, **meta: Any) -> SAWItem:
    base = {
        "truncated": False,
        "episode_truncated": False,
        "finish_reason": "stop",
        "parse_error": False,
        "step_kind": "env",
    }
    return SAWItem(input_ids=[1, 2], action_mask=[0, 1], weight=weight, meta={**base, **meta})


def test_filters_keep_and_drop_by_meta() -> None:
    plain = item()
    assert keep_all(plain) and drop_truncated(plain) and drop_parse_errors(plain) and keep_env_steps(plain)
    assert not drop_truncated(item(truncated=True))
    assert drop_truncated(item(episode_truncated=True)) and not drop_truncated_episodes(
        item(episode_truncated=True)
    )
    assert not drop_incomplete_completions(item(finish_reason="length"))
    assert not drop_incomplete_completions(item(incomplete_completion=True))
    assert not drop_parse_errors(item(parse_error=True, step_kind="agent"))
    assert keep_agent_steps(item(step_kind="agent")) and not keep_env_steps(item(step_kind="agent"))
    zero = drop_zero_weight()
    assert not zero(item(weight=0.0)) and not zero(item(weight=5e-5)) and zero(item(weight=-0.5))
    both = combine(drop_truncated, drop_parse_errors)
    either = any_of(keep_agent_steps, drop_truncated)
    assert not both(item(parse_error=True)) and both(plain)
    assert either(item(step_kind="agent", truncated=True)) and not either(item(truncated=True))
    kept, dropped = apply_filter(
        [plain, item(truncated=True), item(weight=0.0)], combine(drop_truncated, zero)
    )
    assert kept == [plain] and dropped == 2
    with pytest.raises(DataError, match="truncated"):
        drop_truncated(SAWItem(input_ids=[1], action_mask=[1], weight=1.0))
    with pytest.raises(ConfigError):
        drop_zero_weight(-1.0)


def guess(**kwargs: Any) -> RolloutRequest:
    return RolloutRequest(env=EnvSpec("guess", kwargs), protocol=ProtocolSpec("single"))


def test_mixture_curriculum_shifts_the_mix_and_difficulty_over_steps() -> None:
    # Two sources; the schedule moves all weight from "easy" to "hard" over 10 steps, and "hard"
    # also grows its range with the step (a difficulty schedule).
    curriculum = MixtureCurriculum(
        sources={
            "easy": lambda rng, step: guess(max_number=3),
            "hard": lambda rng, step: guess(max_number=10 + step),
        },
        schedule=linear_schedule({"easy": 1.0}, {"hard": 1.0}, steps=10),
        batch_size=50,
        seed=3,
    )
    first, last = curriculum(0), curriculum(10)
    assert {r.meta["curriculum_source"] for r in first} == {"easy"}
    assert {r.meta["curriculum_source"] for r in last} == {"hard"}
    assert {r.env.kwargs["max_number"] for r in last} == {20}
    middle = [r.meta["curriculum_source"] for r in curriculum(5)]
    assert 10 < middle.count("hard") < 40
    assert curriculum(5) == curriculum(5)  # a step's requests depend only on (seed, step)
    grouped = MixtureCurriculum(
        sources={"easy": lambda rng, step: guess(max_number=3)},
        schedule=piecewise_schedule([(0, {"easy": 1.0})]),
        batch_size=2,
        strategy=GRPORequestStrategy(3, seed=0),
    )
    assert len(grouped(0)) == 6
    with pytest.raises(ConfigError, match="unknown sources"):
        MixtureCurriculum(sources={"a": lambda rng, s: guess()}, schedule=lambda s: {"b": 1.0}, batch_size=1)(
            0
        )


def test_sequence_requests_walk_seeded_epochs() -> None:
    provider = SequenceRequests(
        samples=list(range(5)), build=lambda s, i: guess(max_number=s + 1), batch_size=2, seed=1
    )
    seen = [r.meta["sample_index"] for step in range(5) for r in provider(step)]
    assert sorted(seen[:5]) == [0, 1, 2, 3, 4] and sorted(seen[5:]) == [0, 1, 2, 3, 4]
    assert seen[:5] != seen[5:]  # reshuffled each epoch
    fresh = SequenceRequests(
        samples=list(range(5)), build=lambda s, i: guess(max_number=s + 1), batch_size=2, seed=1
    )
    assert fresh(3) == provider(3)


async def test_rollout_batch_source_runs_a_curriculum_and_resumes() -> None:
    curriculum = MixtureCurriculum(
        sources={
            "easy": lambda rng, step: guess(max_number=2),
            "hard": lambda rng, step: guess(max_number=9),
        },
        schedule=piecewise_schedule([(0, {"easy": 1.0}), (1, {"hard": 1.0})]),
        batch_size=3,
        strategy=GRPORequestStrategy(2, seed=0),
    )
    source = RolloutBatchSource(
        engine=guess_engine(),
        credit_assigner=GroupNormalizedReturn(2),
        requests=curriculum,
        settings=RolloutSettings(max_steps=3),
    )
    assert isinstance(source, BatchSource)
    first = await source.next_batch()
    assert first.meta["step"] == 0 and first.meta["num_episodes"] == 6
    assert {i.meta["curriculum_source"] for i in first.items} == {"easy"}
    state = source.state_dict()
    second = await source.next_batch()
    assert {i.meta["curriculum_source"] for i in second.items} == {"hard"}
    resumed = RolloutBatchSource(
        engine=guess_engine(),
        credit_assigner=GroupNormalizedReturn(2),
        requests=curriculum,
        settings=RolloutSettings(max_steps=3),
    )
    resumed.load_state_dict(state)
    again = await resumed.next_batch()
    assert again.meta["step"] == 1 and again.meta["episode_index_range"] == second.meta["episode_index_range"]


async def test_offline_source_from_rollout_logs_and_saw_files(tmp_path: Path) -> None:
    log = tmp_path / "rollouts.jsonl"
    engine = guess_engine(rollout_log=log)
    online = await engine.generate_batch(
        [guess(max_number=4)] * 6, RolloutSettings(max_steps=3), credit_assigner=PerStepReward()
    )
    source = OfflineBatchSource.from_rollout_logs(log, credit_assigner=PerStepReward(), batch_size=4, seed=2)
    assert len(source) == len(online.items)
    # The same turns with the same weights as online (order aside).
    key = lambda i: (i.meta["rollout_id"], i.meta["step_index"])  # noqa: E731
    assert sorted(source.items, key=key) == sorted(online.items, key=key)

    saw_path = tmp_path / "items.jsonl"
    write_saw_jsonl(saw_path, online.items)
    saw_source = OfflineBatchSource.from_saw_files(saw_path, batch_size=4, seed=2, shuffle=False)
    assert saw_source.items == online.items
    epoch0 = [await saw_source.next_batch() for _ in range(saw_source.num_batches_per_epoch)]
    assert [i for b in epoch0 for i in b.items] == online.items
    assert (await saw_source.next_batch()).meta["epoch"] == 1


def test_offline_source_shuffles_per_epoch_resumes_and_shards() -> None:
    items = [item(weight=float(i)) for i in range(10)]
    source = OfflineBatchSource(items, batch_size=4, seed=5)
    weights = [[i.weight for i in source.next_batch_sync().items] for _ in range(6)]
    assert [len(w) for w in weights] == [4, 4, 2, 4, 4, 2]
    epoch0 = [w for batch in weights[:3] for w in batch]
    epoch1 = [w for batch in weights[3:] for w in batch]
    assert sorted(epoch0) == sorted(epoch1) == [float(i) for i in range(10)]
    assert epoch0 != epoch1
    replay = OfflineBatchSource(items, batch_size=4, seed=5)
    replay.next_batch_sync()
    state = replay.state_dict()
    resumed = OfflineBatchSource(items, batch_size=4, seed=5)
    resumed.load_state_dict(state)
    assert [i.weight for i in resumed.next_batch_sync().items] == weights[1]
    ranks = [OfflineBatchSource(items, batch_size=5, seed=5, world_size=3, rank=r) for r in range(3)]
    seen = [i.weight for r in ranks for i in r.next_batch_sync().items]
    assert len(seen) == 9 and len(set(seen)) == 9
    dropping = OfflineBatchSource(items, batch_size=4, seed=5, drop_last=True)
    assert [len(dropping.next_batch_sync()) for _ in range(3)] == [4, 4, 4]
    filtered = OfflineBatchSource(items, batch_size=4, sample_filter=drop_zero_weight())
    assert len(filtered) == 9 and filtered.num_filtered == 1
    with pytest.raises(DataError, match="after filtering"):
        OfflineBatchSource([item(weight=0.0)], batch_size=1, sample_filter=drop_zero_weight())


def test_constant_credit_offline_for_sft(tmp_path: Path) -> None:
    # SFT over logged rollouts: every turn gets weight 1.
    log = tmp_path / "r.jsonl"
    asyncio.run(guess_engine(rollout_log=log).generate_rollouts([guess()] * 2, RolloutSettings(max_steps=2)))
    source = OfflineBatchSource.from_rollout_logs(log, credit_assigner=ConstantCredit(), batch_size=2)
    assert {i.weight for i in source.items} == {1.0}
