"""SPO: the value tracker's update, the advantages, prioritised prompt sampling and resumable state."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from core_data_builders import one_turn_rollout

from ludic_core.credit import CreditAssigner
from ludic_core.errors import ConfigError, DataError
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.spo import SPOAdvantage, SPORequests, SPOValueTracker, sample_index_key
from ludic_core.types import Rollout


def rollout(reward: float, index: int | str, rid: str) -> Rollout:
    r = one_turn_rollout(reward, rollout_id=rid)
    r.meta["request_meta"] = {"sample_index": index}
    r.meta["sample_index"] = index
    return r


def final_weights(assigner: CreditAssigner, rollouts: list[Rollout]) -> list[float]:
    weights = assigner.compute(rollouts)
    return [weights[(r.id, r.steps[-1].index)] for r in rollouts]


# -- tracker -------------------------------------------------------------------------------------------


def test_tracker_update_matches_hand_computed_values() -> None:
    # Prior Beta(1, 1), fixed rho = 0.875. Every number below is a binary fraction, so == is exact.
    t = SPOValueTracker()
    assert t.estimate("a") == 0.5 and "a" not in t
    t.update("a", 1.0)  # alpha = 0.875*1 + 1 = 1.875, beta = 0.875*1 + 0 = 0.875
    assert t.counts("a") == (1.875, 0.875)
    assert t.estimate("a") == 1.875 / 2.75  # 0.6818...
    t.update("a", 0.0)  # alpha = 0.875*1.875 = 1.640625, beta = 0.875*0.875 + 1 = 1.765625
    assert t.counts("a") == (1.640625, 1.765625)
    assert t.estimate("a") == pytest.approx(0.481651376)
    # Two samples of one policy: one discount, then both added. 1.0 and a fractional 0.5:
    # alpha = 0.875*1.640625 + 1.5 = 2.935546875, beta = 0.875*1.765625 + 0.5 = 2.044921875
    t.update("a", [1.0, 0.5])
    assert t.counts("a") == (2.935546875, 2.044921875)
    assert t.counts("b") == (1.0, 1.0) and len(t) == 1


def test_tracker_kl_adaptive_discount() -> None:
    t = SPOValueTracker(d_half=0.06, rho_min=0.875, rho_max=0.96)
    assert t.discount(None) == 0.875  # the fixed fallback rho
    assert t.discount(0.0) == 0.96  # 2**0 = 1, clipped to rho_max
    assert t.discount(0.06) == 0.875  # 2**-1 = 0.5, clipped to rho_min
    assert t.discount(0.01) == pytest.approx(2 ** (-1 / 6))  # 0.8909, inside the clip range
    t.update("a", 1.0, kl=0.0)  # alpha = 0.96*1 + 1, beta = 0.96*1
    assert t.counts("a") == pytest.approx((1.96, 0.96))
    with pytest.raises(DataError, match="kl must be"):
        t.update("a", 1.0, kl=-0.1)


def test_tracker_warm_start_and_validation() -> None:
    t = SPOValueTracker()
    t.warm_start("q", [1, 1, 1, 0])  # v0 = (3 + 0.5) / (4 + 1) = 0.7; n = 1/(1 - 0.875) = 8
    assert t.counts("q") == pytest.approx((5.6, 2.4))
    t.warm_start("q", [1.0])  # solved by its one sample: v0 = 1.5 / 2 = 0.75, not certainty
    assert t.counts("q") == pytest.approx((6.0, 2.0))
    t.warm_start("q", [1, 0], effective_count=4)  # v0 = 1.5 / 3 = 0.5
    assert t.counts("q") == (2.0, 2.0)
    with pytest.raises(
        DataError, match=r"success for prompt 'q' must be a finite number >= 0 and <= 1, got 1.5"
    ):
        t.update("q", 1.5)
    with pytest.raises(ConfigError, match=r"SPOValueTracker\.rho must be"):
        SPOValueTracker(rho=0.0)
    with pytest.raises(ConfigError, match="rho_min must be <= rho_max"):
        SPOValueTracker(rho_min=0.99, rho_max=0.9)
    with pytest.raises(ConfigError, match="alpha0 \\+ beta0 must be > 0"):
        SPOValueTracker(alpha0=0.0, beta0=0.0)


def test_tracker_state_round_trips_through_json() -> None:
    t = SPOValueTracker()
    t.update("0", [1.0, 0.0, 0.3])
    t.update("x", 0.1, kl=0.02)
    state = json.loads(json.dumps(t.state_dict()))
    fresh = SPOValueTracker()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == t.state_dict()
    for tracker in (t, fresh):
        tracker.update("0", 0.7)
    assert fresh.counts("0") == t.counts("0") and fresh.counts("x") == t.counts("x")
    with pytest.raises(ConfigError, match=r"counts\['0'\] must be \[alpha, beta\]"):
        fresh.load_state_dict({"format": 1, "counts": {"0": [1.0, -1.0]}})
    with pytest.raises(ConfigError, match="format must be 1"):
        fresh.load_state_dict({"counts": {}})


def test_default_key_is_sample_index_and_missing_key_is_named() -> None:
    assert sample_index_key({"sample_index": 3}) == "3"
    t = SPOValueTracker()
    assert t.key_of_rollout(rollout(1.0, 7, "r")) == "7"
    with pytest.raises(DataError, match=r"rollout 'bare'.*no 'sample_index'"):
        t.key_of_rollout(one_turn_rollout(1.0, rollout_id="bare"))
    custom = SPOValueTracker(key_fn=lambda meta: str(meta["question_id"]))
    r = one_turn_rollout(1.0, rollout_id="c")
    r.meta["request_meta"] = {"question_id": "q-17"}
    assert custom.key_of_rollout(r) == "q-17"


def tracker_with(counts: dict[str, tuple[float, float]]) -> SPOValueTracker:
    t = SPOValueTracker()
    t.load_state_dict({"format": 1, "counts": {k: list(v) for k, v in counts.items()}})
    return t


# -- credit --------------------------------------------------------------------------------------------


def test_advantages_on_a_hand_computed_batch() -> None:
    t = tracker_with({"0": (3.0, 1.0), "2": (1.0, 3.0)})  # p = 0.75, 0.25; prompt "1" keeps the prior, 0.5
    batch = [rollout(1.0, 0, "a"), rollout(0.0, 1, "b"), rollout(1.0, 2, "c"), rollout(0.0, 0, "d")]
    weights = final_weights(SPOAdvantage(t, eps=0.0), batch)
    # A = R - p(before the batch): [1-0.75, 0-0.5, 1-0.25, 0-0.75] = [0.25, -0.5, 0.75, -0.75]
    # mean = -0.0625; centred = [0.3125, -0.4375, 0.8125, -0.6875];
    # population variance = (0.09765625 + 0.19140625 + 0.66015625 + 0.47265625) / 4 = 0.35546875
    std = math.sqrt(0.35546875)  # 0.596212...
    assert weights == pytest.approx([0.3125 / std, -0.4375 / std, 0.8125 / std, -0.6875 / std])
    assert weights == pytest.approx([0.524142, -0.733799, 1.362770, -1.153113], abs=1e-6)
    # Then the tracker took the batch: prompt 0 got both of its rewards under one discount.
    assert t.counts("0") == (0.875 * 3 + 1, 0.875 * 1 + 1)  # (3.625, 1.875)
    assert t.counts("1") == (0.875, 1.875)
    assert t.counts("2") == (1.875, 2.625)


def test_every_step_gets_the_advantage_and_equal_advantages_give_zero() -> None:
    t = SPOValueTracker()
    batch = [rollout(1.0, 0, "a"), rollout(0.0, 1, "b")]
    weights = SPOAdvantage(t).compute(batch)
    assert weights[("a", 0)] == weights[("a", 1)] == pytest.approx(1.0)
    assert weights[("b", 0)] == weights[("b", 1)] == pytest.approx(-1.0)
    # Two prompts at the same estimate and the same reward: every A is equal, so every weight is 0.
    same = tracker_with({"0": (1.0, 1.0), "1": (1.0, 1.0)})
    assert final_weights(SPOAdvantage(same), [rollout(1.0, 0, "x"), rollout(1.0, 1, "y")]) == [0.0, 0.0]
    assert final_weights(SPOAdvantage(SPOValueTracker()), [rollout(0.0, 0, "solo")]) == [0.0]
    assert SPOAdvantage(SPOValueTracker()).compute([]) == {}


def test_reward_range_maps_rewards_to_successes_and_rejects_outside() -> None:
    t = SPOValueTracker()
    credit = SPOAdvantage(t, reward_min=-1.0, reward_max=1.0)
    # Baseline in reward units: -1 + 2*0.5 = 0, so raw A = [0.5, -1]; success of 0.5 is 0.75.
    weights = final_weights(credit, [rollout(0.5, 0, "a"), rollout(-1.0, 1, "b")])
    assert weights == pytest.approx([1.0, -1.0])
    assert t.counts("0") == (0.875 + 0.75, 0.875 + 0.25)
    before = t.state_dict()
    with pytest.raises(DataError, match=r"rollout 'c' has total_reward=1.5 outside .* \[-1.0, 1.0\]"):
        credit.compute([rollout(0.0, 0, "ok"), rollout(1.5, 1, "c")])
    assert t.state_dict() == before  # nothing was folded in
    with pytest.raises(ConfigError, match="reward_max must be > reward_min"):
        SPOAdvantage(t, reward_min=1.0, reward_max=1.0)
    with pytest.raises(DataError, match="appears twice"):
        credit.compute([rollout(0.0, 0, "dup"), rollout(0.0, 1, "dup")])


def test_kl_of_drives_the_discount() -> None:
    t = SPOValueTracker()
    SPOAdvantage(t, kl_of=lambda r: 0.0).compute([rollout(1.0, 0, "a")])
    assert t.counts("0") == pytest.approx((1.96, 0.96))  # rho_max = 0.96


# -- requests ------------------------------------------------------------------------------------------


def build(sample: str, index: int) -> RolloutRequest:
    return RolloutRequest(env=EnvSpec("toy", kwargs={"prompt": sample}), protocol=ProtocolSpec("p"))


def test_requests_are_distinct_prompts_tagged_with_sample_index() -> None:
    provider = SPORequests(
        samples=[f"q{i}" for i in range(6)], build=build, batch_size=4, tracker=SPOValueTracker()
    )
    requests = provider(0)
    indices = [r.meta["sample_index"] for r in requests]
    assert len(requests) == 4 and len(set(indices)) == 4
    assert all(r.env.kwargs["prompt"] == f"q{i}" for r, i in zip(requests, indices, strict=True))
    twice = SPORequests(
        samples=["a", "b"],
        build=lambda s, i: build(s, i).with_changes(sampling_seed=10),
        batch_size=1,
        tracker=SPOValueTracker(),
        samples_per_prompt=2,
    )(0)
    assert [r.sampling_seed for r in twice] == [10, 11]
    with pytest.raises(ConfigError, match="batch_size=3 exceeds the pool of 2"):
        SPORequests(samples=["a", "b"], build=build, batch_size=3, tracker=SPOValueTracker())


def test_uncertain_prompts_are_drawn_more_often() -> None:
    t = tracker_with({str(i): (1.0, 0.0) for i in range(1, 10)})  # solved: p = 1, priority = eps = 0.05
    provider = SPORequests(
        samples=list(range(10)), build=lambda s, i: build(str(s), i), batch_size=1, tracker=t
    )
    assert provider.priorities() == pytest.approx([0.55] + [0.05] * 9)  # sqrt(0.25) + 0.05 for p = 0.5
    picks = [provider(step)[0].meta["sample_index"] for step in range(400)]
    share = picks.count(0) / len(picks)
    assert 0.45 < share < 0.65  # expected 0.55 / (0.55 + 9 * 0.05) = 0.55; uniform would be 0.1


def test_provider_state_resumes_exactly_through_json() -> None:
    def run(provider: SPORequests, credit: SPOAdvantage, steps: range) -> list[list[int]]:
        drawn = []
        for step in steps:
            requests = provider(step)
            indices = [r.meta["sample_index"] for r in requests]
            drawn.append(indices)
            # A deterministic reward per prompt and step, so both runs feed the tracker alike.
            credit.compute([rollout(float((i + step) % 3 == 0), i, f"{step}-{i}") for i in indices])
        return drawn

    def fresh() -> tuple[SPORequests, SPOAdvantage]:
        tracker = SPOValueTracker()
        samples = [f"q{i}" for i in range(8)]
        return SPORequests(samples=samples, build=build, batch_size=3, tracker=tracker, seed=5), SPOAdvantage(
            tracker
        )

    provider, credit = fresh()
    whole = run(provider, credit, range(6))

    first, first_credit = fresh()
    head = run(first, first_credit, range(3))
    state: dict[str, Any] = json.loads(json.dumps(first.state_dict()))
    resumed, resumed_credit = fresh()
    resumed.load_state_dict(state)
    assert resumed_credit.tracker.state_dict() == first.tracker.state_dict()  # the shared tracker
    assert head + run(resumed, resumed_credit, range(3, 6)) == whole
    assert resumed.tracker.state_dict() == provider.tracker.state_dict()
    with pytest.raises(ConfigError, match="rng_state"):
        resumed.load_state_dict({"tracker": state["tracker"]})
