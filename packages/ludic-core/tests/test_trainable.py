"""A rollout whose steps make no item is dropped with its group and counted; the others still train."""

from __future__ import annotations

import pytest
from core_data_builders import agent_step, env_step, trace

from ludic_core.credit import ConstantCredit, GroupNormalizedReturn, credit_signature
from ludic_core.errors import UnbuildableRolloutError
from ludic_core.saw_builder import build_saw_items
from ludic_core.trainable import credited_items
from ludic_core.types import EpisodeFailure, Rollout, Step


def rollout(
    rollout_id: str, group: str, reward: float, *, size: int = 2, second_prompt: tuple[int, ...] = (1, 2, 3)
) -> Rollout:
    """One turn of two model calls; ``second_prompt`` must start with the first call's (1, 2) + (3,)."""
    first = trace([1, 2], [3], [-0.1])
    second = trace(list(second_prompt), [4], [-0.2])
    steps: list[Step] = [
        agent_step(0, "T", first, target="external"),
        agent_step(1, "T", second),
        env_step(2, "T", second, reward=reward),
    ]
    made = Rollout(
        steps=steps, meta={"agent_id": "agent_0", "request_meta": {"group_id": group, "group_size": size}}
    )
    made.id = rollout_id
    return made


BROKEN = (9, 9, 9)  # does not start with the first call's tokens


def test_an_unbuildable_rollout_is_dropped_with_its_group_and_counted() -> None:
    rollouts = [
        rollout("a1", "a", 1.0, size=3),
        rollout("a2", "a", 0.0, size=3, second_prompt=BROKEN),
        rollout("a3", "a", 0.0, size=3),
        rollout("b1", "b", 1.0),
        rollout("b2", "b", 0.0),
    ]
    with pytest.raises(UnbuildableRolloutError, match=r"'a2'.*do not extend") as raised:
        build_saw_items(rollouts, ConstantCredit(1.0).compute(rollouts))
    assert raised.value.rollout_id == "a2"

    credited = credited_items(rollouts, GroupNormalizedReturn())
    assert [r.id for r in credited.rollouts] == ["b1", "b2"]
    assert [item.meta["rollout_id"] for item in credited.items] == ["b1", "b2"]
    assert set(credited.unbuildable) == {"a2"} and "do not extend" in credited.unbuildable["a2"]
    assert credited.num_failed == 0 and credited.num_dropped_incomplete_groups == 2
    # Reward minus the mean of group b (1, 0).
    assert [item.weight for item in credited.items] == pytest.approx([0.5, -0.5])


def test_failed_and_unbuildable_rollouts_are_counted_apart() -> None:
    failed = rollout("c1", "c", 0.0)
    failed.failure = EpisodeFailure(stage="env", error_type="RuntimeError", message="boom")
    rollouts = [failed, rollout("c2", "c", 1.0), rollout("d1", "d", 1.0, second_prompt=BROKEN)]
    credited = credited_items(rollouts, ConstantCredit(1.0))
    assert credited.items == [] and credited.rollouts == []
    assert credited.num_failed == 1 and set(credited.unbuildable) == {"d1"}
    assert credited.num_dropped_incomplete_groups == 1


def test_healthy_rollouts_make_the_same_items_as_build_saw_items() -> None:
    rollouts = [rollout("e1", "e", 1.0), rollout("e2", "e", 0.0)]
    credit = GroupNormalizedReturn()
    credited = credited_items(rollouts, credit)
    # The same items, each also recording the credit assigner that weighted it.
    assert {item.meta.pop("credit") for item in credited.items} == {credit_signature(credit)}
    assert credited.items == build_saw_items(rollouts, credit.compute(rollouts))
    assert credited.unbuildable == {} and credited.num_dropped_incomplete_groups == 0
