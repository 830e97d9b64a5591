from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from core_data_builders import guess_engine

from ludic_core import RolloutSettings
from ludic_core.credit import GroupNormalizedReturn, MonteCarloReturn, credit_signature
from ludic_core.engine import DEFAULT_EPISODE_TIMEOUT_S, DEFAULT_MODEL_CALL_TIMEOUT_S, RolloutEngine
from ludic_core.errors import (
    ConfigError,
    EpisodeError,
    MissingExtraError,
    RegistryError,
    TransportError,
    missing_extra,
)
from ludic_core.inference import InferenceSpec, ReturnSpec, TokenCompletionRequest
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.registry import ENVS, PROTOCOLS
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.rollout_log import RolloutLog, read_rollouts
from ludic_core.saw import SAWBatch
from ludic_core.serialization import rollout_to_dict
from ludic_core.strategies import GRPORequestStrategy, IdentityStrategy
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient
from ludic_core.types import Info, StepOutcome

RL = InferenceSpec(return_=ReturnSpec.for_rl())


def guess_request(**kwargs: Any) -> RolloutRequest:
    return RolloutRequest(env=EnvSpec("guess", {"max_number": 9}), protocol=ProtocolSpec("single"), **kwargs)


# -- strategies ------------------------------------------------------------------------------------


def test_grpo_groups_share_env_seed_and_have_distinct_sampling_seeds() -> None:
    base = [guess_request(), guess_request(env_seed=5, sampling_seed=100, meta={"q": 1})]
    expanded = GRPORequestStrategy(3, seed=7).expand(base)
    assert len(expanded) == 6
    first, second = expanded[:3], expanded[3:]
    for members in (first, second):
        assert len({r.env_seed for r in members}) == 1
        assert len({r.meta["group_id"] for r in members}) == 1
        assert [r.meta["group_index"] for r in members] == [0, 1, 2]
        seeds = [r.sampling_seed for r in members]
        assert seeds == [seeds[0], seeds[0] + 1, seeds[0] + 2]  # type: ignore[operator]
    assert [r.env_seed for r in second] == [5, 5, 5]
    assert [r.sampling_seed for r in second] == [100, 101, 102]
    assert second[0].meta == {
        "q": 1,
        "group_id": second[0].meta["group_id"],
        "group_index": 0,
        "group_size": 3,
    }
    assert first[0].meta["group_id"] != second[0].meta["group_id"]
    # Seeded: the same seed gives the same expansion; successive calls draw new seeds and ids.
    again = GRPORequestStrategy(3, seed=7).expand(base)
    assert [(r.env_seed, r.sampling_seed, r.meta) for r in again] == [
        (r.env_seed, r.sampling_seed, r.meta) for r in expanded
    ]
    strategy = GRPORequestStrategy(2, seed=7)
    a, b = strategy.expand([guess_request()]), strategy.expand([guess_request()])
    assert a[0].env_seed != b[0].env_seed and a[0].meta["group_id"] != b[0].meta["group_id"]
    with pytest.raises(ConfigError, match="already has group_id"):
        strategy.expand(a)
    assert IdentityStrategy().expand(base) == base


def test_grpo_strategy_state_resumes() -> None:
    strategy = GRPORequestStrategy(2, seed=3)
    strategy.expand([guess_request()])
    state = strategy.state_dict()
    expected = strategy.expand([guess_request()])
    resumed = GRPORequestStrategy(2, seed=3)
    resumed.load_state_dict(state)
    assert resumed.expand([guess_request()]) == expected


def test_request_validation() -> None:
    with pytest.raises(ConfigError, match="reserved keys"):
        guess_request(meta={"engine": 1})
    with pytest.raises(ConfigError, match="env_seed"):
        guess_request(env_seed=-1)
    with pytest.raises(ConfigError, match="kind"):
        EnvSpec("")


# -- engine: seeds, meta ---------------------------------------------------------------------------


async def test_default_seeds_never_repeat_and_fresh_engines_reproduce() -> None:
    engine = guess_engine(base_seed=100)
    first = await engine.generate_rollouts([guess_request()] * 3, RolloutSettings(max_steps=2))
    second = await engine.generate_rollouts([guess_request()] * 3, RolloutSettings(max_steps=2))
    seeds = [e.env_seed for e in first.episodes + second.episodes]
    assert seeds == [100, 101, 102, 103, 104, 105]
    assert [e.sampling_seed for e in second.episodes] == [103, 104, 105]
    assert engine.episodes_started == 6
    replay = guess_engine(base_seed=100)
    again = await replay.generate_rollouts([guess_request()] * 3, RolloutSettings(max_steps=2))
    assert [e.env_seed for e in again.episodes] == [100, 101, 102]
    strip = lambda r: [(s.kind, s.trace, s.reward, s.action) for s in r.steps]  # noqa: E731
    assert [strip(r) for r in again.rollouts] == [strip(r) for r in first.rollouts]
    # Resuming the counter continues where the state left off.
    resumed = guess_engine(base_seed=100)
    resumed.load_state_dict(engine.state_dict())
    third = await resumed.generate_rollouts([guess_request()], RolloutSettings(max_steps=1))
    assert third.episodes[0].env_seed == 106


async def test_meta_is_merged_and_engine_block_added() -> None:
    engine = guess_engine()
    result = await engine.generate_rollouts(
        [guess_request(env_seed=3, meta={"dataset_id": "d7"}, inference=RL)],
        RolloutSettings(max_steps=2, timeout_s=5.0),
    )
    [rollout] = result.rollouts
    meta = rollout.meta
    assert meta["dataset_id"] == "d7"
    assert meta["request_meta"] == {"dataset_id": "d7"}
    assert meta["agent_id"] == "agent_0" and meta["env_name"] == "GuessNumberEnv"
    assert meta["episode_index"] == 0
    assert meta["engine"] == {
        "episode_index": 0,
        "max_steps": 2,
        "timeout_s": 5.0,
        "episode_timeout_s": DEFAULT_EPISODE_TIMEOUT_S,
        "env_kind": "guess",
        "protocol_kind": "single",
        "env_seed": 3,
        "sampling_seed": 0,
        "env_seed_source": "request",
        "sampling_seed_source": "engine",
        "return_spec": {"return_chosen_logprobs": True, "top_logprobs_k": 1},
    }


async def test_kinds_resolve_through_the_registry_and_unknown_kinds_fail_up_front() -> None:
    ENVS.register("test-guess-engine", GuessNumberEnv)
    PROTOCOLS.register(
        "test-single-engine",
        lambda: SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["3"], cycle=True))),
    )
    try:
        engine = RolloutEngine()
        request = RolloutRequest(EnvSpec("test-guess-engine"), ProtocolSpec("test-single-engine"))
        result = await engine.generate_rollouts([request], RolloutSettings(max_steps=1))
        assert result.rollouts[0].env_steps[0].parsed_action == "3"
        with pytest.raises(RegistryError, match="no-such-env"):
            await engine.generate_rollouts(
                [RolloutRequest(EnvSpec("no-such-env"), request.protocol)], RolloutSettings(max_steps=1)
            )
        assert engine.episodes_started == 1  # nothing was scheduled for the bad call
    finally:
        ENVS.unregister("test-guess-engine")
        PROTOCOLS.unregister("test-single-engine")


async def test_explicit_factory_on_the_spec() -> None:
    engine = guess_engine(choices=["1"])
    request = RolloutRequest(
        EnvSpec("my-env", {"max_number": 1}, factory=GuessNumberEnv), ProtocolSpec("single"), env_seed=1
    )
    result = await engine.generate_rollouts([request], RolloutSettings(max_steps=1))
    assert result.rollouts[0].total_reward == 1.0  # max_number=1: every guess of "1" wins


# -- engine: failures ------------------------------------------------------------------------------


class FlakyGuessEnv(GuessNumberEnv):
    """Raises on the first step of episodes whose env seed is odd."""

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        self.flaky = seed is not None and seed % 2 == 1
        return super().env_reset(seed=seed)

    def env_step(self, action: str) -> StepOutcome:
        if self.flaky:
            raise RuntimeError("env exploded")
        return super().env_step(action)


def flaky_engine(**kwargs: Any) -> RolloutEngine:
    client = ScriptedChatClient(["1"], cycle=True)
    return RolloutEngine(
        env_factories={"flaky": FlakyGuessEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
        **kwargs,
    )


async def test_failing_episodes_are_reported_and_others_kept_with_continue() -> None:
    engine = flaky_engine()
    requests = [RolloutRequest(EnvSpec("flaky"), ProtocolSpec("single"), env_seed=s) for s in range(6)]
    result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=2, on_failure="continue"))
    assert [e.failed for e in result.episodes] == [False, True, False, True, False, True]
    failure = result.episodes[1].failure
    assert failure is not None and failure.stage == "env" and "env exploded" in failure.message
    assert len(result.successful_rollouts) == 3
    assert result.failure_summary()[0]["episode_index"] == 1


async def test_failure_policy_raise() -> None:
    engine = flaky_engine()
    requests = [RolloutRequest(EnvSpec("flaky"), ProtocolSpec("single"), env_seed=s) for s in range(4)]
    with pytest.raises(EpisodeError, match=r"stage 'env'.*env exploded"):
        await engine.generate_rollouts(requests, RolloutSettings(max_steps=2, on_failure="raise"))
    with pytest.raises(ConfigError, match=r"RolloutSettings\.on_failure must be one of .*'ignore'"):
        RolloutSettings(max_steps=2, on_failure="ignore")  # type: ignore[arg-type]


async def test_failed_episodes_and_their_groups_are_left_out_of_batches() -> None:
    engine = flaky_engine()
    base = [RolloutRequest(EnvSpec("flaky"), ProtocolSpec("single"), env_seed=s) for s in (2, 3)]
    requests = GRPORequestStrategy(2, seed=0).expand(base)
    batch = await engine.generate_batch(
        requests,
        RolloutSettings(max_steps=2, on_failure="continue"),
        credit_assigner=GroupNormalizedReturn(2),
    )
    assert batch.meta["num_episodes"] == 4
    assert batch.meta["num_failed_episodes"] == 2
    assert batch.meta["num_rollouts"] == 2
    assert {i.meta["episode_index"] for i in batch.items} == {0, 1}  # env seed 2 ok, env seed 3 flaky
    assert {i.meta["group_id"] for i in batch.items} == {requests[0].meta["group_id"]}


async def test_episode_timeout_and_client_errors_become_failures() -> None:
    slow = ScriptedChatClient(["1"], cycle=True, latency_s=5.0)
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(slow))},
    )
    result = await engine.generate_rollouts(
        [guess_request()] * 2,
        RolloutSettings(max_steps=1, episode_timeout_s=0.05, on_failure="continue", max_failure_rate=1.0),
    )
    assert [e.failure.stage for e in result.episodes if e.failure] == ["timeout", "timeout"]
    assert result.rollouts[0].failure is not None and result.rollouts[0].meta["episode_index"] == 0

    def broken(request: TokenCompletionRequest, call_index: int) -> str:
        raise TransportError("server unreachable")

    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(broken)))},
    )
    result = await engine.generate_rollouts(
        [guess_request()], RolloutSettings(max_steps=1, on_failure="continue", max_failure_rate=1.0)
    )
    assert result.episodes[0].failure is not None and result.episodes[0].failure.stage == "client"


def _engine_failing_on(env_seeds: set[int]) -> RolloutEngine:
    """A guess engine whose env fails to reset (a TransportError, as a remote env would) for ``env_seeds``."""

    class FlakyGuessEnv(GuessNumberEnv):
        def reset(self, seed: int | None = None) -> Any:
            if seed in env_seeds:
                raise TransportError(f"env server unreachable (seed {seed})")
            return super().reset(seed=seed)

    return RolloutEngine(
        env_factories={"guess": FlakyGuessEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["1"])))},
    )


async def test_more_failures_than_max_failure_rate_raise_naming_the_first_after_every_episode_ran(
    tmp_path: Path,
) -> None:
    requests = [guess_request(env_seed=s, sampling_seed=s) for s in range(4)]
    done: list[int] = []
    engine = _engine_failing_on({1, 2, 3})
    engine.rollout_log = RolloutLog(tmp_path / "episodes.jsonl")
    with pytest.raises(EpisodeError) as caught:
        await engine.generate_rollouts(
            requests,
            RolloutSettings(max_steps=1, max_failure_rate=0.5),
            on_episode_done=lambda e: done.append(e.episode_index),
        )
    message = str(caught.value)
    assert "3 of 4 episodes failed" in message and "max_failure_rate=0.5" in message
    # The first failure in request order, with its cause, and how many share it.
    assert "episode 1" in message and "env server unreachable (seed 1)" in message
    assert "stage 'env'" in message and "3 of the 3 failed with TransportError" in message
    # Every episode ran and was logged before the call failed: nothing is lost.
    assert sorted(done) == [0, 1, 2, 3]
    assert len(list(read_rollouts(tmp_path / "episodes.jsonl"))) == 4


async def test_failures_up_to_max_failure_rate_are_reported_not_raised() -> None:
    requests = [guess_request(env_seed=s, sampling_seed=s) for s in range(4)]
    result = await _engine_failing_on({1, 2}).generate_rollouts(
        requests, RolloutSettings(max_steps=1, max_failure_rate=0.5)
    )
    assert [e.episode_index for e in result.failed_episodes] == [1, 2]
    with pytest.raises(EpisodeError, match="2 of 4 episodes failed"):
        await _engine_failing_on({1, 2}).generate_rollouts(
            requests, RolloutSettings(max_steps=1, max_failure_rate=0.25)
        )
    strict = RolloutSettings(max_steps=1, max_failure_rate=0.0)
    assert not (await guess_engine().generate_rollouts(requests, strict)).failed_episodes


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", True, float("nan")])
def test_max_failure_rate_must_be_a_share(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_failure_rate must be a finite number >= 0 and <= 1"):
        RolloutSettings(max_steps=1, max_failure_rate=bad)  # type: ignore[arg-type]


async def test_a_missing_extra_while_building_the_env_ends_the_call_instead_of_failing_each_episode() -> None:
    def env_needing_an_extra(**kwargs: Any) -> GuessNumberEnv:
        raise missing_extra("ludic-envs", "hf", "datasets")

    engine = RolloutEngine(
        env_factories={"guess": env_needing_an_extra},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["1"])))},
    )
    with pytest.raises(MissingExtraError, match=r'pip install "ludic-envs\[hf\]"'):
        await engine.generate_rollouts(
            [guess_request()] * 3, RolloutSettings(max_steps=1, max_failure_rate=1.0)
        )


async def test_episode_timers_reused_across_episodes_still_fire_on_time() -> None:
    # Quick episodes leave their (long) episode timers armed for the next ones; a later episode with a
    # short bound must still be cut at its own deadline, on the same loop.
    quick = await guess_engine().generate_rollouts(
        [guess_request()] * 4, RolloutSettings(max_steps=2, episode_timeout_s=60.0)
    )
    assert not quick.failed_episodes
    slow = ScriptedChatClient(["1"], cycle=True, latency_s=5.0)
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(slow))},
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await engine.generate_rollouts(
        [guess_request()] * 3,
        RolloutSettings(max_steps=1, episode_timeout_s=0.05, on_failure="continue", max_failure_rate=1.0),
    )
    assert loop.time() - started < 2.0
    assert [e.failure.stage for e in result.episodes if e.failure] == ["timeout"] * 3


async def test_every_wait_is_bounded_by_default_and_the_settings_own_the_bounds() -> None:
    result = await guess_engine().generate_rollouts([guess_request()], RolloutSettings(max_steps=1))
    engine_meta = result.rollouts[0].meta["engine"]
    assert engine_meta["timeout_s"] == DEFAULT_MODEL_CALL_TIMEOUT_S
    assert engine_meta["episode_timeout_s"] == DEFAULT_EPISODE_TIMEOUT_S
    # The settings given to a call are the ones its rollouts ran (and record) under.
    settings = RolloutSettings(max_steps=1, timeout_s=7.0, episode_timeout_s=70.0)
    result = await guess_engine().generate_rollouts([guess_request()], settings)
    assert result.rollouts[0].meta["engine"]["timeout_s"] == 7.0
    assert result.rollouts[0].meta["engine"]["episode_timeout_s"] == 70.0
    for bad in (None, 0, -1.0, math.inf, True):
        with pytest.raises(
            ConfigError, match=r"RolloutSettings\.episode_timeout_s must be a finite number > 0"
        ):
            RolloutSettings(max_steps=1, episode_timeout_s=bad)  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match=r"RolloutSettings\.timeout_s must be a finite number > 0, got 'soon'"
    ):
        RolloutSettings(max_steps=1, timeout_s="soon")  # type: ignore[arg-type]
    for field in ("max_steps", "concurrency"):
        with pytest.raises(ConfigError, match=rf"RolloutSettings\.{field} must be an int >= 1, got 0"):
            RolloutSettings(**{"max_steps": 1, field: 0})
    with pytest.raises(ConfigError, match=r"generate_rollouts\(settings\) must be a RolloutSettings"):
        await guess_engine().generate_rollouts([guess_request()], {"max_steps": 1})  # type: ignore[arg-type]


class StuckStepEnv(GuessNumberEnv):
    """A synchronous step that blocks (a stand-in for grading in a subprocess or a simulator call)."""

    blocking_step = True
    finished = threading.Event()  # set when a stuck step is over

    def env_step(self, action: str) -> StepOutcome:
        time.sleep(20.0)
        type(self).finished.set()
        return super().env_step(action)


async def test_a_blocking_env_step_runs_off_the_loop_so_the_episode_timeout_fires() -> None:
    client = ScriptedChatClient(["1"], cycle=True)
    engine = RolloutEngine(
        env_factories={"stuck": StuckStepEnv, "guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
    )
    requests = [RolloutRequest(EnvSpec("stuck"), ProtocolSpec("single"))] + [guess_request()] * 3
    StuckStepEnv.finished.clear()
    result = await engine.generate_rollouts(
        requests, RolloutSettings(max_steps=1, episode_timeout_s=0.5, on_failure="continue")
    )
    # The batch ended while the stuck step was still sleeping: the loop never waited for it.
    assert not StuckStepEnv.finished.is_set(), "the stuck step held the event loop"
    [stuck, *others] = result.episodes
    assert stuck.failure is not None and stuck.failure.stage == "timeout"
    assert "episode_timeout_s=0.5" in stuck.failure.message
    assert all(e.failure is None for e in others)


async def test_concurrency_is_bounded() -> None:
    active = 0
    peak = 0

    class Probe(ScriptedChatClient):
        async def complete_tokens(self, request: TokenCompletionRequest) -> Any:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.001)
            try:
                return await super().complete_tokens(request)
            finally:
                active -= 1

    client = Probe(["1"], cycle=True)
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
    )
    await engine.generate_rollouts([guess_request()] * 20, RolloutSettings(max_steps=1, concurrency=3))
    assert peak == 3


async def test_episodes_start_in_request_order_with_one_task_per_slot() -> None:
    started: list[int] = []
    tasks_seen: list[int] = []

    class Recording(GuessNumberEnv):
        def env_reset(self, *, seed: int | None = None) -> Any:
            assert seed is not None
            started.append(seed)
            tasks_seen.append(len(asyncio.all_tasks()))
            return super().env_reset(seed=seed)

    # Replies of different lengths make episodes end out of order; starts must still follow the requests.
    client = ScriptedChatClient(["1", "1" * 40, "2"], cycle=True, latency_s=0.001)
    engine = RolloutEngine(
        env_factories={"guess": Recording},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
    )
    requests = [guess_request(env_seed=s) for s in range(30)]
    result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=3, concurrency=4))
    assert started == list(range(30))
    assert [e.env_seed for e in result.episodes] == list(range(30))  # results keep request order
    # The test's own task and the 4 workers: no task waits for an episode that has not started.
    assert max(tasks_seen) == 5


async def test_failure_policy_raise_cancels_the_episodes_in_flight() -> None:
    cancelled = 0

    class Slow(ScriptedChatClient):
        async def complete_tokens(self, request: TokenCompletionRequest) -> Any:
            nonlocal cancelled
            try:
                await asyncio.sleep(5.0)
            except asyncio.CancelledError:
                cancelled += 1
                raise
            return await super().complete_tokens(request)

    slow_engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(Slow(["1"], cycle=True)))},
    )

    def no_env() -> GuessNumberEnv:
        raise RuntimeError("no env")

    # Episode 0 fails at once (its env factory raises); episodes 1 and 2 are waiting on the model.
    failing = RolloutRequest(EnvSpec("guess", factory=no_env), ProtocolSpec("single"))
    started = asyncio.get_running_loop().time()
    with pytest.raises(EpisodeError, match=r"episode 0 .*stage 'env'.*no env"):
        await slow_engine.generate_rollouts(
            [guess_request(), guess_request(), failing][::-1],
            RolloutSettings(max_steps=2, concurrency=3, on_failure="raise"),
        )
    assert asyncio.get_running_loop().time() - started < 2.0
    assert cancelled == 2


# -- rollout log -----------------------------------------------------------------------------------


async def test_rollout_log_appends_one_valid_line_per_rollout_under_concurrency(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "rollouts.jsonl"
    engine = guess_engine(rollout_log=path)
    result = await engine.generate_rollouts(
        [guess_request(inference=RL)] * 40, RolloutSettings(max_steps=3, concurrency=16)
    )
    await engine.generate_rollouts([guess_request()] * 5, RolloutSettings(max_steps=3))  # appends
    lines = path.read_text().splitlines()
    assert len(lines) == 45
    assert all(json.loads(line)["schema_version"] == 1 for line in lines)
    loaded = {r.id: r for r in read_rollouts(path)}
    for rollout in result.rollouts:
        assert rollout_to_dict(loaded[rollout.id]) == rollout_to_dict(rollout)


# -- scale and reproducibility ---------------------------------------------------------------------


def comparable(batch: SAWBatch) -> list[dict[str, Any]]:
    """Items as dicts without the random ids (rollout and turn ids are uuid4 by design, so that logs of
    different runs never collide); everything else must be bit-identical."""
    out = []
    for item in batch.items:
        data = item.to_dict()
        data["meta"] = {k: v for k, v in data["meta"].items() if k not in ("rollout_id", "turn_id")}
        out.append(data)
    return out


async def test_thousand_small_episodes_run_and_reproduce_exactly() -> None:
    # Tic-tac-toe sized: up to 5 moves per episode; a zero-latency scripted client.
    choices = [str(i) for i in range(1, 10)] + ["not a number", ""]
    base = [guess_request(inference=RL) for _ in range(250)]
    batches = []
    for _ in range(2):
        requests = GRPORequestStrategy(4, seed=11).expand(base)
        engine = guess_engine(base_seed=5, choices=choices)
        batches.append(
            await engine.generate_batch(
                requests,
                RolloutSettings(max_steps=5, concurrency=64),
                credit_assigner=GroupNormalizedReturn(4, normalize_adv=True),
            )
        )
    first, second = batches
    assert first.meta["num_episodes"] == 1000 and first.meta["num_failed_episodes"] == 0
    assert len(first.items) > 1000
    assert any(i.meta["parse_error"] for i in first.items)
    assert any(i.meta["truncation_reason"] == "max_steps" for i in first.items)
    assert comparable(first) == comparable(second)

    assert first.meta == second.meta
    # Different engine seeds give different data (the comparison above is not vacuous).
    other = await guess_engine(base_seed=6, choices=choices).generate_batch(
        [guess_request(inference=RL) for _ in range(50)],
        RolloutSettings(max_steps=5),
        credit_assigner=MonteCarloReturn(),
    )
    assert comparable(other) != comparable(first)[: len(other.items)]


async def test_results_repr_as_counts_not_as_every_token() -> None:
    # asyncio.run (Python 3.11, 3.12) builds the repr of what its coroutine returns: a result's repr
    # must not spell out every step, or `asyncio.run(engine.generate_rollouts(...))` pays for it.
    requests = [guess_request(inference=RL) for _ in range(40)]
    engine = guess_engine(choices=["1", "x", "2"])
    result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=3))
    steps = sum(len(r.steps) for r in result.rollouts)
    assert steps > 80
    assert repr(result) == f"RolloutResult(40 episodes, 40 rollouts, {steps} steps, 0 failed)"
    batch = await engine.generate_batch(
        requests, RolloutSettings(max_steps=3), credit_assigner=MonteCarloReturn()
    )
    assert repr(batch) == f"SAWBatch(<{len(batch.items)} items>, meta={batch.meta!r})"
    assert len(repr(batch)) < 1000 < len(repr(batch.items))
    # Each item records the credit assigner that weighted it; the trainer checks it against its own.
    assert {item.meta["credit"] for item in batch.items} == {credit_signature(MonteCarloReturn())}


async def test_deterministic_ids_make_reruns_identical_down_to_the_ids() -> None:
    base = [guess_request(inference=RL) for _ in range(20)]
    batches = []
    for _ in range(2):
        engine = guess_engine(base_seed=5, deterministic_ids=True)
        requests = GRPORequestStrategy(4, seed=11).expand(base)
        batches.append(
            await engine.generate_batch(
                requests,
                RolloutSettings(max_steps=5, concurrency=8),
                credit_assigner=GroupNormalizedReturn(4),
            )
        )
    first, second = batches
    assert [i.to_dict() for i in first.items] == [i.to_dict() for i in second.items]
    assert len({i.meta["rollout_id"] for i in first.items}) == 80  # unique within the run


class SlowSyncStepEnv(GuessNumberEnv):
    """A synchronous step that computes for a while without declaring ``blocking_step``."""

    def env_step(self, action: str) -> StepOutcome:
        time.sleep(0.2)
        return super().env_step(action)


async def test_a_sync_step_that_holds_the_loop_is_reported_naming_the_env_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ludic_core import env as env_module

    monkeypatch.setattr(env_module, "SLOW_SYNC_STEP_S", 0.05)
    monkeypatch.setattr(env_module, "_REPORTED_SLOW", set())
    engine = RolloutEngine(
        env_factories={"slow": SlowSyncStepEnv},
        protocol_factories={
            "single": lambda: SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["1"], cycle=True)))
        },
    )
    request = RolloutRequest(EnvSpec("slow"), ProtocolSpec("single"))
    with caplog.at_level(logging.WARNING, logger="ludic"):
        await engine.generate_rollouts([request, request], RolloutSettings(max_steps=1))
    reports = [r for r in caplog.records if "step_blocked_the_event_loop" in r.getMessage()]
    assert len(reports) == 1, "reported once per env class"
    message = reports[0].getMessage()
    assert "SlowSyncStepEnv" in message and "blocking_step = True" in message
