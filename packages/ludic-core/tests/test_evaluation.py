from __future__ import annotations

from typing import Any

import pytest

from ludic_core import RolloutSettings
from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError, DataError
from ludic_core.evaluation import MeanAtK, PassAtK, Reducer, run_eval, run_eval_sync, standard_reducers
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient


def answering(answer: str) -> SingleAgentProtocol:
    return SingleAgentProtocol(
        ScriptedAgent(ScriptedChatClient([answer], cycle=True)), stop_on_parse_error=True
    )


def engine() -> RolloutEngine:
    return RolloutEngine(env_factories={"guess": GuessNumberEnv}, protocol_factories={"answer": answering})


def request(answer: str) -> RolloutRequest:
    # max_number=1: the secret is always 1.
    return RolloutRequest(EnvSpec("guess", {"max_number": 1}), ProtocolSpec("answer", {"answer": answer}))


ACCURACY = Reducer("accuracy", "correct", "mean", "rollouts")


async def test_parse_failures_and_truncations_count_in_every_denominator() -> None:
    progress: list[tuple[int, int]] = []
    result = await run_eval(
        engine(),
        [request("1"), request("1"), request(""), request("7")],
        [ACCURACY, *standard_reducers(), Reducer("env_reward_sum", "total_reward", "sum", "rollouts")],
        RolloutSettings(max_steps=1),
        progress=lambda done, total: progress.append((done, total)),
    )
    m = result.metrics
    # Two right, one unparsed (never reached the env), one wrong and cut at max_steps: 2 / 4, not 2 / 3.
    assert m["accuracy"] == 0.5
    assert m["parse_error_rate"] == 0.25
    assert m["rollout_parse_error_rate"] == 0.25
    assert m["truncated_rate"] == 0.25
    assert m["failure_rate"] == 0.0
    assert m["env_reward_sum"] == 1.0 + 1.0 - 1.0 + 0.0  # the empty answer's parser penalty is -1
    assert m["num_rollouts"] == 4 and m["num_samples"] == 4 and m["num_episodes"] == 4
    assert sorted(progress) == [(1, 4), (2, 4), (3, 4), (4, 4)]
    unparsed = result.rollouts[2]
    assert unparsed["reached_env"] is False and unparsed["parse_error"] is True and "correct" not in unparsed
    assert result.samples[2]["step_kind"] == "agent"


def test_sample_level_reducers_and_sync_wrapper() -> None:
    result = run_eval_sync(
        engine(),
        [request("1"), request("")],
        [
            Reducer("sample_accuracy", "correct", "rate", "samples"),
            Reducer("n", lambda r: 1, "sum", "samples"),
        ],
        RolloutSettings(max_steps=1),
    )
    assert result.metrics["sample_accuracy"] == 0.5
    assert result.metrics["n"] == 2.0
    # A summary, not every record (asyncio.run builds the repr of what run_eval_sync returns).
    assert repr(result) == f"EvalResult(metrics={result.metrics!r}, <2 rollouts>, <2 samples>)"


def test_pass_at_k_and_mean_at_k_exact_values() -> None:
    def rec(group: str, correct: bool | None) -> dict[str, Any]:
        r: dict[str, Any] = {"group_id": group, "agent_id": "agent_0", "rollout_id": f"{group}{correct}"}
        if correct is not None:
            r["correct"] = correct
        return r

    # Group a: 1 of 4 right (one never parsed); group b: none right.
    rollouts = [rec("a", True), rec("a", False), rec("a", None), rec("a", False)] + [rec("b", False)] * 4
    assert PassAtK("correct", 2).reduce([], rollouts) == (0.5 + 0.0) / 2  # 1 - C(3,2)/C(4,2) = 0.5
    assert PassAtK("correct", 1).reduce([], rollouts) == (0.25 + 0.0) / 2
    assert PassAtK("correct", 4).reduce([], rollouts) == 0.5
    assert MeanAtK("correct", 4).reduce([], rollouts) == 0.125
    assert PassAtK("correct", 2).name == "pass@2" and MeanAtK("correct", 3).name == "mean@3"
    with pytest.raises(DataError, match="at least k=5"):
        PassAtK("correct", 5).reduce([], rollouts)
    with pytest.raises(DataError, match="no group_id"):
        PassAtK("correct", 1).reduce([], [{"rollout_id": "x"}])


async def test_pass_at_k_over_grpo_groups_end_to_end() -> None:
    requests = GRPORequestStrategy(2, seed=0).expand([request("1"), request("")])
    result = await run_eval(
        engine(), requests, [PassAtK("correct", 1), MeanAtK("correct", 2)], RolloutSettings(max_steps=1)
    )
    assert result.metrics["pass@1"] == 0.5 and result.metrics["mean@2"] == 0.5


async def test_reducer_names_must_be_unique() -> None:
    with pytest.raises(ConfigError, match="unique"):
        await run_eval(engine(), [request("1")], [ACCURACY, ACCURACY], RolloutSettings(max_steps=1))
    with pytest.raises(ConfigError, match="aggregate"):
        Reducer("x", "y", "median")  # type: ignore[arg-type]
