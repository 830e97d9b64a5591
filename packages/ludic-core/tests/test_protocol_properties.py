"""Arbitrary model text through both protocols: never a crash, always a well-formed timeline."""

from __future__ import annotations

import asyncio

from core_test_envs import MatchingPenniesEnv, RaceToTenEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from ludic_core.parsing import ParseResult
from ludic_core.protocols import MultiAgentProtocol, SingleAgentProtocol
from ludic_core.serialization import rollout_from_json, rollout_to_json
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient
from ludic_core.types import AgentStep, EnvironmentStep, Rollout


def digit_parser(text: str) -> ParseResult:
    stripped = text.strip()
    if stripped.isdigit():
        return ParseResult(action=stripped, reward=0.05)
    return ParseResult(action=None, reward=-0.5, obs="digits please")


def check_timeline(rollout: Rollout) -> None:
    assert rollout.failure is None, rollout.failure
    assert [s.index for s in rollout.steps] == list(range(len(rollout.steps)))
    seen_ids: set[str] = set()
    for step in rollout.steps:
        if isinstance(step, EnvironmentStep):
            assert set(step.agent_step_ids) <= seen_ids
            assert all(
                s.turn_id == step.turn_id
                for s in rollout.steps
                if isinstance(s, AgentStep) and s.id in step.agent_step_ids
            )
        seen_ids.add(step.id)
    ended = [s for s in rollout.steps if s.terminated or s.truncated]
    assert len(ended) <= 1 and (not ended or ended[0] is rollout.steps[-1])
    assert rollout_from_json(rollout_to_json(rollout)) == rollout


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["1", "2", " 3 ", "H", "T", "CALL t {}"]
)


@settings(max_examples=80, deadline=None)
@given(outputs=st.lists(texts, min_size=1, max_size=8), max_steps=st.integers(1, 6), stop=st.booleans())
def test_single_agent_arbitrary_text(outputs: list[str], max_steps: int, stop: bool) -> None:
    agent = ScriptedAgent(ScriptedChatClient(outputs, cycle=True), parser=digit_parser)
    protocol = SingleAgentProtocol(agent, stop_on_parse_error=stop)
    [rollout] = asyncio.run(
        protocol.run(env=GuessNumberEnv(), max_steps=max_steps, env_seed=0, sampling_seed=0)
    )
    check_timeline(rollout)
    assert rollout.steps


@settings(max_examples=60, deadline=None)
@given(
    a_out=st.lists(texts, min_size=1, max_size=5),
    b_out=st.lists(texts, min_size=1, max_size=5),
    simultaneous=st.booleans(),
    stop=st.booleans(),
)
def test_multi_agent_arbitrary_text(
    a_out: list[str], b_out: list[str], simultaneous: bool, stop: bool
) -> None:
    if simultaneous:
        env = MatchingPenniesEnv(rounds=3)
        ids = ("even", "odd")
    else:
        env = RaceToTenEnv()
        ids = ("a", "b")
    agents = {
        ids[0]: ScriptedAgent(ScriptedChatClient(a_out, cycle=True)),
        ids[1]: ScriptedAgent(ScriptedChatClient(b_out, cycle=True)),
    }
    rollouts = asyncio.run(MultiAgentProtocol(agents, stop_on_parse_error=stop).run(env=env, max_steps=6))
    assert len(rollouts) == 2
    for rollout in rollouts:
        check_timeline(rollout)
