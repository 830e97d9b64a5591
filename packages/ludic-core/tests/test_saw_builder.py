from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from core_data_builders import agent_step, env_step, trace

from ludic_core.credit import ConstantCredit, PerStepReward
from ludic_core.errors import DataError
from ludic_core.packed_saw import PackedSAWItem, packed_arrays
from ludic_core.saw import SAWBatch, SAWItem
from ludic_core.saw_builder import build_saw_items, rollout_to_saw_items, split_turns
from ludic_core.saw_io import read_saw_jsonl, write_saw_jsonl
from ludic_core.types import EpisodeFailure, Rollout, Step


def two_call_rollout(second_prompt: list[int]) -> Rollout:
    """One turn: an external tool call, then (after the tool output 30, 31) the env action."""
    first = trace([10, 11], [20, 21], [-0.1, -0.2])
    second = trace(second_prompt, [22], [-0.3])
    steps: list[Step] = [
        agent_step(0, "T", first, target="external", info={"policy_version": 7}),
        # A client reports the version at the start and end of a request: a weight update landed
        # during this call, so the turn counts as sampled by version 5.
        agent_step(1, "T", second, info={"policy_version_start": 5, "policy_version_end": 6}),
        env_step(2, "T", second, reward=1.0, info={"correct": True, "board": [1, 2]}),
    ]
    rollout = Rollout(
        steps=steps,
        meta={
            "agent_id": "agent_0",
            "env_name": "Guess",
            "episode_truncated": False,
            "truncation_reason": None,
            "request_meta": {"group_id": "g1", "question": "q"},
            "group_id": "g1",
            "question": "q",
            "engine": {"return_spec": {"return_chosen_logprobs": True}},
        },
    )
    rollout.id = "R"
    return rollout


def test_two_call_turn_concatenates_exactly() -> None:
    rollout = two_call_rollout([10, 11, 20, 21, 30, 31])
    [item] = rollout_to_saw_items(rollout, {("R", 0): 0.0, ("R", 1): 0.0, ("R", 2): 0.75})
    assert item.input_ids == (10, 11, 20, 21, 30, 31, 22)
    assert item.action_mask == (0, 0, 1, 1, 0, 0, 1)
    assert item.actor_logps == (-0.1, -0.2, -0.3)
    assert item.weight == 0.75
    meta = item.meta
    assert meta["rollout_id"] == "R"
    assert meta["step_index"] == 2
    assert meta["step_kind"] == "env"
    assert meta["reward"] == 1.0
    assert meta["total_reward"] == 1.0
    assert meta["completion_length"] == 3
    assert meta["prompt_length"] == 4
    assert meta["turn_id"] == "T"
    assert meta["turn_agent_step_indices"] == [0, 1]
    assert meta["turn_action_targets"] == ["external", "env"]
    assert meta["turn_has_env_step"] is True
    assert meta["group_id"] == "g1"
    assert meta["question"] == "q"
    assert meta["policy_version"] == 5  # the oldest policy that sampled part of the turn
    assert meta["truncated"] is False and meta["episode_truncated"] is False
    assert meta["step_info"] == {"correct": True}  # scalar info only; the list is left out
    assert "engine" not in meta and "request_meta" not in meta


def test_items_are_built_with_their_arrays_packed_once() -> None:
    rollout = two_call_rollout([10, 11, 20, 21, 30, 31])
    [item] = rollout_to_saw_items(rollout, {("R", 0): 0.0, ("R", 1): 0.0, ("R", 2): 0.75})
    packed = packed_arrays(item)
    assert isinstance(item, PackedSAWItem) and packed is not None
    # The mask is the calls' spans: prompt, completion, the tool output, the second completion.
    assert packed.mask_runs == [2, 2, 2, 1] and packed.length == 7
    assert item == SAWItem(
        input_ids=(10, 11, 20, 21, 30, 31, 22),
        action_mask=(0, 0, 1, 1, 0, 0, 1),
        weight=0.75,
        meta=item.meta,
        actor_logps=(-0.1, -0.2, -0.3),
    )


def test_an_empty_completion_inside_a_turn_merges_the_prompt_spans() -> None:
    steps: list[Step] = [
        agent_step(0, "T", trace([10, 11], [], []), target="external"),
        agent_step(1, "T", trace([10, 11, 30], [22], [-0.3])),
    ]
    rollout = Rollout(steps=steps)
    rollout.id = "E"
    [item] = rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]))
    assert packed_arrays(item).mask_runs == [3, 1]  # type: ignore[union-attr]  # as the wire writes it
    assert (item.input_ids, item.action_mask, item.actor_logps) == ((10, 11, 30, 22), (0, 0, 0, 1), (-0.3,))


def test_a_token_id_no_array_holds_gives_the_item_of_tuples_as_before() -> None:
    # SAWItem takes any int id (the wire refuses one outside [0, 2**32) by name when it is sent).
    rollout = Rollout(steps=[agent_step(0, "T", trace([-1, 11], [2**40], [-0.5]))])
    rollout.id = "N"
    [item] = rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]))
    assert type(item) is SAWItem and item.input_ids == (-1, 11, 2**40) and item.action_mask == (0, 0, 1)


def test_items_carry_no_token_lists_in_meta() -> None:
    rollout = two_call_rollout([10, 11, 20, 21, 30, 31])
    [item] = rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]))
    for key, value in item.meta.items():
        if isinstance(value, list):
            assert len(value) <= 2, key  # turn step indices / targets only
        assert "token" not in key and "prompt_ids" not in key


@pytest.mark.parametrize(
    "prompt",
    [
        [10, 11, 20, 99, 30],  # rewrites a sampled token
        [10, 11, 20],  # shorter than the sequence so far
        [11, 20, 21, 30],  # dropped the first token
    ],
)
def test_non_extending_prompt_raises(prompt: list[int]) -> None:
    rollout = two_call_rollout(prompt)
    with pytest.raises(DataError, match="do not extend the sequence so far"):
        rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]))


def test_turns_split_on_turn_id_and_parse_failures_get_their_own_item() -> None:
    tr = trace([1, 2], [3], [-1.0])
    steps: list[Step] = [
        agent_step(0, "A", tr, reward=-0.5, parse_error=True),
        agent_step(1, "B", trace([1, 2, 3, 4], [5], [-2.0])),
        env_step(
            2,
            "B",
            trace([1, 2, 3, 4], [5], [-2.0]),
            reward=1.0,
            truncated=True,
            truncation_reason="max_steps",
        ),
    ]
    rollout = Rollout(steps=steps, meta={"episode_truncated": True, "truncation_reason": "max_steps"})
    rollout.id = "P"
    turns = split_turns(rollout)
    assert [(t.turn_id, [s.index for s in t.agent_steps], t.env_step is not None) for t in turns] == [
        ("A", [0], False),
        ("B", [1], True),
    ]
    items = rollout_to_saw_items(rollout, PerStepReward().compute([rollout]))
    assert [i.weight for i in items] == [-0.5, 1.0]
    assert [i.meta["step_kind"] for i in items] == ["agent", "env"]
    assert [i.meta["parse_error"] for i in items] == [True, False]
    assert [i.meta["truncated"] for i in items] == [False, True]
    assert items[1].meta["truncation_reason"] == "max_steps"
    assert items[0].meta["episode_truncation_reason"] == "max_steps"
    assert items[0].meta["group_id"] is None


def test_two_env_steps_in_one_turn_and_mixed_logprobs_are_errors() -> None:
    tr = trace([1], [2])
    two_env = Rollout(steps=[agent_step(0, "T", tr), env_step(1, "T", tr), env_step(2, "T", tr)])
    with pytest.raises(DataError, match="at most one"):
        split_turns(two_env)
    mixed = Rollout(
        steps=[
            agent_step(0, "T", trace([1], [2], [-1.0]), target="internal"),
            agent_step(1, "T", trace([1, 2], [3])),
        ]
    )
    with pytest.raises(DataError, match="no completion logprobs"):
        rollout_to_saw_items(mixed, ConstantCredit().compute([mixed]))


def test_items_carry_the_temperature_their_calls_sampled_with() -> None:
    def rollout(first_t: float | None, second_t: float | None) -> Rollout:
        first = attrs.evolve(trace([1], [2], [-0.1]), sampling_temperature=first_t)
        second = attrs.evolve(trace([1, 2, 3], [4], [-0.2]), sampling_temperature=second_t)
        return Rollout(
            steps=[
                agent_step(0, "T", first, target="internal"),
                agent_step(1, "T", second),
                env_step(2, "T", second),
            ]
        )

    same = rollout(0.7, 0.7)
    [item] = rollout_to_saw_items(same, ConstantCredit().compute([same]))
    assert item.sampling_temperature == 0.7
    unknown = rollout(None, None)
    assert rollout_to_saw_items(unknown, ConstantCredit().compute([unknown]))[0].sampling_temperature is None
    for mixed in (rollout(0.7, 1.0), rollout(None, 1.0)):
        with pytest.raises(DataError, match=r"different temperatures \{0: (0\.7|None), 1: 1\.0\}"):
            rollout_to_saw_items(mixed, ConstantCredit().compute([mixed]))


def test_missing_logprobs_and_missing_weight_and_failed_rollouts_raise() -> None:
    rollout = Rollout(steps=[agent_step(0, "T", trace([1], [2])), env_step(1, "T", trace([1], [2]))])
    with pytest.raises(DataError, match="asked for actor logprobs"):
        rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]), require_actor_logps=True)
    assert rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]))[0].actor_logps is None
    with pytest.raises(DataError, match="no credit"):
        rollout_to_saw_items(rollout, {})
    rollout.failure = EpisodeFailure(stage="env", error_type="RuntimeError", message="boom")
    with pytest.raises(DataError, match="failed"):
        rollout_to_saw_items(rollout, ConstantCredit().compute([rollout]))


def test_saw_item_and_batch_json_round_trip_losslessly(tmp_path: Path) -> None:
    rollout = two_call_rollout([10, 11, 20, 21, 30, 31])
    items = build_saw_items([rollout], {("R", 2): -0.123456789012345678})
    item = items[0]
    assert SAWItem.from_dict(json.loads(json.dumps(item.to_dict()))) == item
    batch = SAWBatch(items=items * 2, meta={"num_samples": 2})
    assert SAWBatch.from_dict(json.loads(json.dumps(batch.to_dict()))) == batch
    assert item.to_dict()["schema_version"] == 1
    path = tmp_path / "saw.jsonl"
    assert write_saw_jsonl(path, items * 3) == 3
    assert list(read_saw_jsonl(path)) == items * 3
