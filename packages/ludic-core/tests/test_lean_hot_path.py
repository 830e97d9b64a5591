"""The engine's hot path shares what it used to copy and checks once what it used to check per object;
these tests pin that the sharing is safe and the values (seeds, ids, validation errors) are unchanged."""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
import json
import multiprocessing
import os
import pickle
import re
from typing import Any

import attrs
import pytest

from ludic_core.errors import ConfigError, DataError
from ludic_core.ids import new_id
from ludic_core.protocols.timeline import AgentTimeline
from ludic_core.saw import SAWItem
from ludic_core.seeding import derive_seed, seed_deriver
from ludic_core.types import AgentStep, ChatResponse, FrozenMessage, TokenTrace, freeze_message


def step_with(messages: object) -> AgentStep:
    trace = TokenTrace(prompt_token_ids=[1], completion_token_ids=[2])
    return AgentStep(
        index=0, trace=trace, prompt_messages=messages, action="a", action_target="env", turn_id="t"
    )


def test_frozen_message_refuses_every_change_and_copies_to_a_plain_dict() -> None:
    message = FrozenMessage(role="user", content="hi")
    assert message == {"role": "user", "content": "hi"} and isinstance(message, dict)
    changes = [
        lambda: message.__setitem__("content", "x"),
        lambda: message.__delitem__("role"),
        lambda: message.update(content="x"),
        lambda: message.pop("role"),
        lambda: message.popitem(),
        lambda: message.setdefault("name", "x"),
        message.clear,
    ]
    for change in changes:
        with pytest.raises(TypeError, match="immutable"):
            change()
    assert message == {"role": "user", "content": "hi"}
    for duplicate in (dict(message), copy.copy(message), copy.deepcopy(message)):
        assert type(duplicate) is dict and duplicate == message
        duplicate["content"] = "changed"
    assert message["content"] == "hi"
    restored = pickle.loads(pickle.dumps(message))
    assert type(restored) is FrozenMessage and restored == message
    assert json.loads(json.dumps(message)) == message


def test_steps_share_frozen_messages_and_freeze_a_copy_of_plain_ones() -> None:
    frozen = (FrozenMessage(role="system", content="s"), FrozenMessage(role="user", content="u"))
    step = step_with(frozen)
    assert step.prompt_messages is frozen  # shared, not copied
    plain = [{"role": "user", "content": "u"}]
    step = step_with(plain)
    plain[0]["content"] = "changed later by the agent"
    assert step.prompt_messages == ({"role": "user", "content": "u"},)
    assert type(step.prompt_messages[0]) is FrozenMessage
    assert freeze_message(frozen[0]) is frozen[0]


def test_seed_deriver_gives_exactly_derive_seed() -> None:
    for base, prefix, rest in [
        (0, (), ()),
        (7, ("agent_0",), (3, 0)),
        (7, ("agent_0",), (-3, 10**20)),  # the per-call fast path formats ints as repr does
        (7, ("agent_0",), (True, 0)),  # a bool is not an int here: repr gives "True"
        (2**31 - 1, ("a", 1), ("x",)),
        (5, (), (1,)),
    ]:
        assert seed_deriver(base, *prefix)(*rest) == derive_seed(base, *prefix, *rest)
    with pytest.raises(ConfigError, match="base must be an int"):
        seed_deriver(True)


def test_derive_seed_is_the_hash_of_the_parts_text_on_every_path() -> None:
    # The documented derivation, spelled out: BLAKE2b (8 bytes) of "base\x1fpart..." (repr of each
    # part), mod 2**31. One int part takes a formatting fast path; the values must not move.
    def by_the_text(base: int, *parts: object) -> int:
        text = "\x1f".join([str(base), *map(repr, parts)])
        return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") % 2**31

    for base in (0, 11, -3, 2**31 - 1, 10**20):
        for parts in [(0,), (7,), (-1,), (10**20,), (True,), (1, 2), ("x",), ()]:
            assert derive_seed(base, *parts) == by_the_text(base, *parts)
    assert derive_seed(11, 0) == 1556303557  # pinned: seeds are stable across releases
    with pytest.raises(ConfigError, match="base must be an int"):
        derive_seed(True, 0)


def test_timeline_call_seeds_are_the_per_call_derivation() -> None:
    timeline = AgentTimeline(agent_id="agent_1", turn_start_obs="")
    assert timeline.call_seed(None, 0, 0) is None
    for sampling_seed in (11, 12):  # the cached episode part follows a new sampling seed
        for attempt, round_ in [(0, 0), (2, 1)]:
            expected = derive_seed(sampling_seed, "agent_1", attempt, round_)
            assert timeline.call_seed(sampling_seed, attempt, round_) == expected


def test_trace_from_a_response_shares_its_checked_tuples() -> None:
    response = ChatResponse(
        text="x", prompt_token_ids=[1, 2], completion_token_ids=[3], completion_logprobs=[-1]
    )
    trace = response.to_trace()
    assert trace == TokenTrace(prompt_token_ids=[1, 2], completion_token_ids=[3], completion_logprobs=[-1.0])
    assert trace.prompt_token_ids is response.prompt_token_ids
    warmer = trace.with_sampling_temperature(1)
    assert warmer.sampling_temperature == 1.0 and warmer.prompt_token_ids is trace.prompt_token_ids
    with pytest.raises(
        DataError, match=r"sampling_temperature must be None or a finite number >= 0, got -1\.0"
    ):
        trace.with_sampling_temperature(-1)


def test_binary_masks_are_still_checked_element_by_element() -> None:
    for bad, value, position in [((1, 2, 0), "2", 1), ((0, 0, -1), "-1", 2)]:
        with pytest.raises(
            DataError, match=rf"action_mask must hold only 0/1; got {value} at position {position}"
        ):
            SAWItem(input_ids=[1, 2, 3], action_mask=bad, weight=1.0)
    with pytest.raises(DataError, match=r"action_mask\[1\] must be an int, got True"):
        SAWItem(input_ids=[1, 2], action_mask=[0, True], weight=1.0)
    with pytest.raises(DataError, match=r"action_mask\[0\] must be an int, got 1.0"):
        SAWItem(input_ids=[1, 2], action_mask=[1.0, 0], weight=1.0)


def test_ids_are_uuid4_hex() -> None:
    ids = {new_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", i) for i in ids)


def _child_ids(conn: Any) -> None:
    conn.send([new_id() for _ in range(3)])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_reuses_the_parents_ids() -> None:
    new_id()  # the parent now holds ids drawn ahead of use
    parent_end, child_end = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_child_ids, args=(child_end,))
    child.start()
    assert parent_end.poll(30), "the child sent no ids"
    in_child = parent_end.recv()
    child.join(30)
    assert not set(in_child) & {new_id() for _ in range(200)}


def test_threads_drawing_ids_at_once_never_share_one() -> None:
    def draw() -> list[str]:
        return [new_id() for _ in range(5_000)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        drawn = [i for ids in pool.map(lambda _: draw(), range(4)) for i in ids]
    assert len(set(drawn)) == len(drawn) == 20_000


def test_marking_a_step_truncated_equals_evolve_and_checks_the_reason() -> None:
    from ludic_core.types import EnvironmentStep, _mark_step_truncated

    trace = TokenTrace(prompt_token_ids=[1], completion_token_ids=[2])
    agent_step = step_with([{"role": "user", "content": "u"}])
    env_step = EnvironmentStep(
        index=1,
        trace=trace,
        prev_obs="o",
        action="a",
        parsed_action="a",
        next_obs="n",
        turn_id="t",
        source_agent_step_id=agent_step.id,
        agent_step_ids=[agent_step.id],
        reward=1.0,
        info={"k": 1},
    )
    for step in (agent_step, env_step):
        info = {**step.info, "truncation_reason": "max_steps"}
        marked = _mark_step_truncated(step, "max_steps", info)
        expected = attrs.evolve(step, truncated=True, truncation_reason="max_steps", info=info)
        if isinstance(step, EnvironmentStep):
            expected = attrs.evolve(expected, next_obs=None)
        assert marked == expected and marked.id == step.id and marked.ts_ns == step.ts_ns
        assert type(marked) is type(step) and not step.truncated  # the original is unchanged
        with pytest.raises(DataError, match="truncation_reason"):
            _mark_step_truncated(step, "bogus", info)  # type: ignore[arg-type]


def _envs_that_must_be_awaited() -> list[Any]:
    """GuessNumber envs whose step is not the default one: blocking, waiting on I/O, or their own."""
    from ludic_core.testing import GuessNumberEnv
    from ludic_core.types import StepOutcome

    class Blocking(GuessNumberEnv):
        blocking_step = True

    class WaitsOnIO(GuessNumberEnv):
        async def aenv_step(self, action: str) -> StepOutcome:
            return self.env_step(action)

    class OwnStep(GuessNumberEnv):
        def step(self, actions: object) -> dict[str, StepOutcome]:
            raise AssertionError("the default astep never calls an overridden step")

    return [Blocking(), WaitsOnIO(), OwnStep()]


def test_envs_are_stepped_directly_only_where_astep_would_just_call_step() -> None:
    from ludic_core.protocols.acting import direct_step
    from ludic_core.testing import GuessNumberEnv

    env, twin = GuessNumberEnv(), GuessNumberEnv()
    step = direct_step(env)
    assert step is not None  # env.step, timed (a step that holds the loop for long is reported)
    env.reset(seed=0)
    twin.reset(seed=0)
    assert step({"agent_0": "3"}) == twin.step({"agent_0": "3"})
    for awaited in _envs_that_must_be_awaited():
        assert direct_step(awaited) is None


def test_single_agent_envs_skip_the_step_dicts_and_the_active_check_only_with_the_defaults() -> None:
    from ludic_core.protocols.acting import always_active, direct_env_step
    from ludic_core.testing import GuessNumberEnv

    env, twin = GuessNumberEnv(), GuessNumberEnv()
    step = direct_env_step(env)
    assert step is not None and always_active(env)
    env.reset(seed=0)
    twin.reset(seed=0)
    assert {"agent_0": step("3")} == twin.step({"agent_0": "3"})

    class OwnActionCheck(GuessNumberEnv):
        def _single_action(self, actions: object) -> str:
            return "5"

    for stepped_through_step in (*_envs_that_must_be_awaited(), OwnActionCheck()):
        assert direct_env_step(stepped_through_step) is None

    class GoesQuiet(GuessNumberEnv):
        @property
        def active_agents(self) -> list[str]:
            return []

    class Renamed(GuessNumberEnv):
        @property
        def agent_ids(self) -> list[str]:
            return ["other"]

    assert not always_active(GoesQuiet()) and not always_active(Renamed())


def test_an_agents_trusted_act_step_still_checks_the_rules_between_fields() -> None:
    from ludic_core.harness import AgentActResult, AgentActStep
    from ludic_core.parsing import ParseResult

    trace = TokenTrace(prompt_token_ids=[1], completion_token_ids=[2])
    prompt = (FrozenMessage(role="user", content="u"),)
    built = AgentActStep(
        trace=trace, prompt_messages=prompt, action="a", action_target="env", parse_result=ParseResult("a")
    )
    trusted = AgentActStep._trusted(trace, prompt, "a", "env", ParseResult("a"))
    assert trusted == built and trusted.prompt_messages is prompt
    assert AgentActResult._one(trusted) == AgentActResult(steps=[built])
    with pytest.raises(DataError, match="action_target='env' needs a parse_result"):
        AgentActStep._trusted(trace, prompt, "a", "env", None)
    with pytest.raises(DataError, match="action_target='external' needs tool_calls"):
        AgentActStep._trusted(trace, prompt, "a", "external", None)


def test_trusted_constructors_put_every_value_in_its_own_field() -> None:
    # The _trusted constructors fill slots through setters unpacked in field order: every field gets
    # a value no other field has, so a setter out of order shows as a mismatch with __init__.
    from ludic_core.harness import AgentActStep
    from ludic_core.parsing import ParseResult
    from ludic_core.types import EnvironmentStep, ToolCall, ToolResult

    trace = TokenTrace._trusted((1, 2), (3,), (-0.5,), "stop", 0.7)
    assert trace == TokenTrace(
        prompt_token_ids=[1, 2],
        completion_token_ids=[3],
        completion_logprobs=[-0.5],
        finish_reason="stop",
        sampling_temperature=0.7,
    )
    prompt = (FrozenMessage(role="user", content="u"),)
    calls, results = (ToolCall("c", "tool"),), (ToolResult("c", "tool", "out"),)
    act = AgentActStep._trusted(
        trace, prompt, "act", "external", ParseResult("p"), 4, calls, results, {"i": 1}
    )
    assert act == AgentActStep(
        trace=trace,
        prompt_messages=prompt,
        action="act",
        action_target="external",
        parse_result=ParseResult("p"),
        loop_index=4,
        tool_calls=calls,
        tool_results=results,
        info={"i": 1},
    )
    for parse_error, terminated in ((True, False), (False, True)):  # the flags told apart both ways
        agent = AgentStep._trusted(
            7, trace, prompt, "act", "env", "turn", 2, -1.0, {"parser": -1.0}, parse_error, terminated,
            calls, results, {"k": 1},
        )  # fmt: skip
        expected = AgentStep(
            index=7,
            trace=trace,
            prompt_messages=prompt,
            action="act",
            action_target="env",
            turn_id="turn",
            loop_index=2,
            reward=-1.0,
            reward_components={"parser": -1.0},
            parse_error=parse_error,
            terminated=terminated,
            tool_calls=calls,
            tool_results=results,
            info={"k": 1},
        )
        assert attrs.evolve(agent, id=expected.id, ts_ns=expected.ts_ns) == expected
    env = EnvironmentStep._trusted(
        3,
        trace,
        "before",
        "act",
        "parsed",
        None,
        "turn",
        "src",
        ("a", "b"),
        1.5,
        {"env": 1.5},
        False,
        True,
        {"k": 2},
    )
    expected_env = EnvironmentStep(
        index=3,
        trace=trace,
        prev_obs="before",
        action="act",
        parsed_action="parsed",
        next_obs=None,
        turn_id="turn",
        source_agent_step_id="src",
        agent_step_ids=("a", "b"),
        reward=1.5,
        reward_components={"env": 1.5},
        terminated=False,
        truncated=True,
        truncation_reason="env",
        info={"k": 2},
    )
    assert attrs.evolve(env, id=expected_env.id, ts_ns=expected_env.ts_ns) == expected_env
    assert (agent.kind, env.kind) == ("agent", "env")


def test_setter_built_values_equal_their_init() -> None:
    # ActOptions, EpisodeRun and EpisodeResult have no converters or checks: _of must give exactly the
    # value __init__ gives, each argument in its own field (distinct values show a swap).
    from ludic_core.engine import EpisodeResult
    from ludic_core.harness import ActOptions
    from ludic_core.inference import InferenceSpec
    from ludic_core.protocols.base import EpisodeRun
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.testing import GuessNumberEnv
    from ludic_core.types import EpisodeFailure, Rollout

    spec = InferenceSpec()
    assert ActOptions._of(spec, 7, 2.5) == ActOptions(inference=spec, sampling_seed=7, timeout_s=2.5)
    env = GuessNumberEnv()
    assert EpisodeRun._of(env, 20, 3, 4, spec, 9.0) == EpisodeRun(
        env=env, max_steps=20, env_seed=3, sampling_seed=4, inference=spec, timeout_s=9.0
    )
    request = RolloutRequest(EnvSpec("guess"), ProtocolSpec("single"))
    rollouts = (Rollout(),)
    failure = EpisodeFailure(stage="env", error_type="E", message="m")
    assert EpisodeResult._of(1, request, 2, 3, rollouts, failure, 0.5) == EpisodeResult(
        episode_index=1,
        request=request,
        env_seed=2,
        sampling_seed=3,
        rollouts=rollouts,
        failure=failure,
        duration_s=0.5,
    )
