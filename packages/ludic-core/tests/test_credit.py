from __future__ import annotations

import math

import pytest
from core_data_builders import agent_step, env_step, one_turn_rollout, trace

from ludic_core.credit import (
    ConstantCredit,
    CreditAssigner,
    EpisodicReturn,
    GroupNormalizedReturn,
    HybridNormalizedReturn,
    MonteCarloReturn,
    PerStepReward,
    counted_reward,
)
from ludic_core.errors import ConfigError, DataError
from ludic_core.types import Rollout, Step


def group(rewards: list[float], gid: str = "g") -> list[Rollout]:
    return [one_turn_rollout(r, group_id=gid, rollout_id=f"{gid}{i}") for i, r in enumerate(rewards)]


def final_weights(assigner: CreditAssigner, rollouts: list[Rollout]) -> list[float]:
    weights = assigner.compute(rollouts)
    return [weights[(r.id, r.steps[-1].index)] for r in rollouts]


def test_group_normalised_with_std_gives_plus_minus_one() -> None:
    assert final_weights(GroupNormalizedReturn(4, normalize_adv=True), group([1, 0, 0, 1])) == [
        1.0,
        -1.0,
        -1.0,
        1.0,
    ]


def test_group_normalised_without_std_is_mean_centred() -> None:
    assert final_weights(GroupNormalizedReturn(4), group([1, 0, 0, 1])) == [0.5, -0.5, -0.5, 0.5]
    assert final_weights(GroupNormalizedReturn(2), group([3, 1])) == [1.0, -1.0]


def test_zero_variance_group_gives_zero_not_nan() -> None:
    for normalize in (False, True):
        weights = final_weights(GroupNormalizedReturn(3, normalize_adv=normalize), group([0.1, 0.1, 0.1]))
        assert weights == [0.0, 0.0, 0.0]


def test_positive_only_clamps_after_scaling() -> None:
    weights = final_weights(
        GroupNormalizedReturn(4, normalize_adv=True, positive_only=True), group([1, 0, 0, 1])
    )
    assert weights == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("rewards", "after", "before"),
    [
        # Centred [0.75, -0.25, -0.25, -0.25], std sqrt(0.1875). After: 0.75 / sqrt(0.1875) = sqrt(3).
        # Before: clamped [0.75, 0, 0, 0] has mean 0.1875, variance 0.10546875: 0.75 / its root = 4/sqrt(3).
        ([1, 0, 0, 0], [math.sqrt(3), 0, 0, 0], [4 / math.sqrt(3), 0, 0, 0]),
        # Centred [1.5, 0.5, -0.5, -1.5], variance 1.25: after gives [3, 1, 0, 0] / sqrt(5).
        # Clamped [1.5, 0.5, 0, 0]: mean 0.5, variance (1 + 0 + 0.25 + 0.25) / 4 = 0.375: [1.5, 0.5] / sqrt(0.375).
        ([2, 1, 0, -1], [3 / math.sqrt(5), 1 / math.sqrt(5), 0, 0], [math.sqrt(6), math.sqrt(6) / 3, 0, 0]),
    ],
)
def test_positive_only_clamp_order_against_hand_computed_weights(
    rewards: list[float], after: list[float], before: list[float]
) -> None:
    def weights(**kw: object) -> list[float]:
        return final_weights(GroupNormalizedReturn(4, positive_only=True, **kw), group(rewards))  # type: ignore[arg-type]

    assert weights(normalize_adv=True) == pytest.approx(after, rel=1e-12)
    assert weights(normalize_adv=True, clamp_order="after_normalize") == pytest.approx(after, rel=1e-12)
    assert weights(normalize_adv=True, clamp_order="before_normalize") == pytest.approx(before, rel=1e-12)
    # Without the std division the order cannot matter: both are the clamped centred rewards.
    mean = sum(rewards) / 4
    centred = [max(r - mean, 0.0) for r in rewards]
    assert weights(clamp_order="after_normalize") == weights(clamp_order="before_normalize") == centred


def test_clamp_order_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"clamp_order must be one of .* got 'early'"):
        GroupNormalizedReturn(4, positive_only=True, clamp_order="early")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="clamp_order='before_normalize' only applies with positive_only"):
        GroupNormalizedReturn(4, normalize_adv=True, clamp_order="before_normalize")


def test_every_step_of_a_rollout_gets_its_advantage() -> None:
    rollouts = group([2, 0])
    weights = GroupNormalizedReturn(2).compute(rollouts)
    assert weights == {("g0", 0): 1.0, ("g0", 1): 1.0, ("g1", 0): -1.0, ("g1", 1): -1.0}


def test_groups_are_strict_about_size_and_ids() -> None:
    with pytest.raises(DataError, match="has 3 rollouts, expected group_size=4"):
        GroupNormalizedReturn(4).compute(group([1, 0, 1]))
    with pytest.raises(DataError, match="no group_id"):
        GroupNormalizedReturn(1).compute([one_turn_rollout(1.0)])
    with pytest.raises(ConfigError, match="group_size"):
        GroupNormalizedReturn(0)


def test_the_group_size_comes_from_the_requests_the_strategy_expanded() -> None:
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.strategies import GRPORequestStrategy

    [request, *_] = GRPORequestStrategy(group_size=3, seed=0).expand(
        [RolloutRequest(EnvSpec("e"), ProtocolSpec("p"))]
    )
    rollouts = group([1, 0, 0])
    for r in rollouts:
        r.meta["request_meta"] = dict(request.meta)  # what the engine stamps
    # Given once, to the strategy: the assigner reads it and still checks completeness.
    assert final_weights(GroupNormalizedReturn(), rollouts) == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    with pytest.raises(DataError, match="has 2 rollouts, expected group_size=3"):
        GroupNormalizedReturn().compute(rollouts[:2])
    with pytest.raises(
        ConfigError, match="requested with group_size=3 but the credit assigner has group_size=4"
    ):
        GroupNormalizedReturn(4).compute(rollouts)
    rollouts[0].meta["request_meta"]["group_size"] = 5
    with pytest.raises(DataError, match="mixes rollouts whose meta says group_size"):
        GroupNormalizedReturn().compute(rollouts)
    # Hand-made groups without the meta need the size on the assigner.
    with pytest.raises(DataError, match="has no group_size in its meta"):
        GroupNormalizedReturn().compute(group([1, 0]))
    assert final_weights(HybridNormalizedReturn(2), group([1, 0])) == pytest.approx([1.0, -1.0])


def test_groups_are_per_agent_role() -> None:
    rollouts = group([1, 0])
    for r, agent in zip(rollouts, ["x", "y"], strict=True):
        r.meta["agent_id"] = agent
    with pytest.raises(DataError, match="has 1 rollouts"):
        GroupNormalizedReturn(2).compute(rollouts)


def test_hybrid_centres_per_group_and_scales_by_batch_std() -> None:
    # Group a: rewards 1, 0 -> centred ±0.5; group b: 3, 3 -> 0, 0. Batch std of (0.5, -0.5, 0, 0) = sqrt(0.125).
    rollouts = group([1, 0], "a") + group([3, 3], "b")
    weights = final_weights(HybridNormalizedReturn(2, eps=0.0), rollouts)
    scale = math.sqrt(0.125)
    assert weights == [0.5 / scale, -0.5 / scale, 0.0, 0.0]
    assert final_weights(HybridNormalizedReturn(2, eps=0.0, positive_only=True), rollouts) == [
        0.5 / scale,
        0,
        0,
        0,
    ]
    assert final_weights(HybridNormalizedReturn(2), group([2, 2], "c")) == [0.0, 0.0]


def multi_turn_rollout() -> Rollout:
    """Turn A: internal tool call (parser penalty -1 that must NOT count) + env step reward 1.
    Turn B: env-targeted parse failure with penalty -0.5. Turn C: env step reward 2."""
    tr = trace([1], [2])
    steps: list[Step] = [
        agent_step(0, "A", tr, target="internal", reward=-1.0, parse_error=False),
        agent_step(1, "A", tr),
        env_step(2, "A", tr, reward=1.0),
        agent_step(3, "B", tr, reward=-0.5, parse_error=True),
        agent_step(4, "C", tr),
        env_step(5, "C", tr, reward=2.0),
    ]
    rollout = Rollout(steps=steps)
    rollout.id = "r"
    return rollout


def test_counted_rewards_sum_to_total_reward() -> None:
    rollout = multi_turn_rollout()
    assert [counted_reward(s) for s in rollout.steps] == [0.0, 0.0, 1.0, -0.5, 0.0, 2.0]
    assert rollout.total_reward == 2.5
    assert math.fsum(counted_reward(s) for s in rollout.steps) == rollout.total_reward


def test_monte_carlo_return_uses_counted_rewards_discounted_per_turn() -> None:
    rollout = multi_turn_rollout()
    assert MonteCarloReturn(1.0).compute([rollout]) == {
        ("r", 0): 2.5,
        ("r", 1): 2.5,
        ("r", 2): 2.5,
        ("r", 3): 1.5,
        ("r", 4): 2.0,
        ("r", 5): 2.0,
    }
    w = MonteCarloReturn(0.5).compute([rollout])
    # G_C = 2, G_B = -0.5 + 0.5*2 = 0.5, G_A = 1 + 0.5*0.5 = 1.25
    assert [w[("r", i)] for i in range(6)] == [1.25, 1.25, 1.25, 0.5, 2.0, 2.0]
    assert MonteCarloReturn(1.0).compute([rollout])[("r", 0)] == rollout.total_reward


def test_per_step_episodic_and_constant() -> None:
    rollout = multi_turn_rollout()
    assert [PerStepReward().compute([rollout])[("r", i)] for i in range(6)] == [0.0, 0.0, 1.0, -0.5, 0.0, 2.0]
    assert set(EpisodicReturn().compute([rollout]).values()) == {2.5}
    assert ConstantCredit(0.25).compute([rollout]) == {("r", i): 0.25 for i in range(6)}
    with pytest.raises(ConfigError):
        ConstantCredit(float("nan"))
    with pytest.raises(ConfigError):
        MonteCarloReturn(1.5)


def test_duplicate_rollout_ids_are_rejected() -> None:
    a, b = one_turn_rollout(1.0, rollout_id="same"), one_turn_rollout(0.0, rollout_id="same")
    with pytest.raises(DataError, match="appears twice"):
        EpisodicReturn().compute([a, b])
