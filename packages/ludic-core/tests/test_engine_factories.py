"""Engine factory mappings are checked when the engine is built; the standard protocols resolve by name."""

from __future__ import annotations

import re
from typing import Any

import pytest
from core_test_envs import MatchingPenniesEnv

from ludic_core import RolloutSettings
from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError
from ludic_core.protocols import MultiAgentProtocol, SingleAgentProtocol
from ludic_core.registry import PROTOCOLS, make_protocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient

# -- factory mappings --------------------------------------------------------------------------------


class CallableEnv(GuessNumberEnv):
    """An env whose class defines ``__call__``: callable, yet still an instance, not a factory."""

    def __call__(self) -> CallableEnv:
        return self


def _protocol() -> SingleAgentProtocol:
    return SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["1"], cycle=True)))


@pytest.mark.parametrize(
    ("kwargs", "patterns"),
    [
        (
            {"env_factories": {"guess": GuessNumberEnv()}},
            [
                r"env_factories\['guess'\]",
                "already-built LudicEnv instance",
                r"GuessNumberEnv: <",
                "a callable returning a fresh LudicEnv per episode",
                "lambda: TicTacToeEnv",
                "or the class itself",
            ],
        ),
        (
            {"env_factories": {"guess": CallableEnv()}},
            [r"env_factories\['guess'\]", "already-built LudicEnv instance", "CallableEnv"],
        ),
        (
            {"env_factories": {"guess": "tictactoe"}},
            [r"env_factories\['guess'\]", "not callable", "str: 'tictactoe'", "fresh LudicEnv"],
        ),
        (
            {"protocol_factories": {"single": _protocol()}},
            [
                r"protocol_factories\['single'\]",
                "already-built InteractionProtocol instance",
                "SingleAgentProtocol",
                "fresh InteractionProtocol per episode",
            ],
        ),
        (
            {"protocol_factories": {"single": None}},
            [r"protocol_factories\['single'\]", "not callable", "NoneType: None"],
        ),
        ({"env_factories": {"": GuessNumberEnv}}, ["env_factories keys must be non-empty str", "str: ''"]),
        ({"protocol_factories": {3: _protocol}}, ["protocol_factories keys must be non-empty str", "int: 3"]),
        ({"env_factories": [GuessNumberEnv]}, ["env_factories must be a mapping", "list"]),
    ],
)
def test_bad_factory_mappings_fail_when_the_engine_is_built(
    kwargs: dict[str, Any], patterns: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        RolloutEngine(**kwargs)
    for pattern in patterns:
        assert re.search(pattern, str(info.value)), (pattern, str(info.value))


def test_long_values_are_truncated_in_the_message() -> None:
    with pytest.raises(ConfigError) as info:
        RolloutEngine(env_factories={"guess": "x" * 500})
    assert "..." in str(info.value) and "x" * 200 not in str(info.value)


def test_classes_and_lambdas_are_accepted() -> None:
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv, "small": lambda: GuessNumberEnv(max_number=2)},
        protocol_factories={"single": _protocol},
    )
    assert set(engine.env_factories) == {"guess", "small"}


# -- standard protocols by name ----------------------------------------------------------------------


def test_standard_protocols_are_registered_under_their_names() -> None:
    assert {SingleAgentProtocol.name, MultiAgentProtocol.name} <= set(PROTOCOLS.names())
    client = ScriptedChatClient(["1"], cycle=True)
    single = make_protocol(
        "single_agent", agent_factory=lambda: ScriptedAgent(client), stop_on_parse_error=True
    )
    assert isinstance(single, SingleAgentProtocol) and single.stop_on_parse_error
    multi = make_protocol(
        "multi_agent",
        agent_factories={"even": lambda: ScriptedAgent(client), "odd": lambda: ScriptedAgent(client)},
    )
    assert isinstance(multi, MultiAgentProtocol) and sorted(multi.agents) == ["even", "odd"]


async def test_single_agent_spec_runs_through_the_engine_with_a_fresh_agent_per_episode() -> None:
    built: list[ScriptedAgent] = []

    def make_agent() -> ScriptedAgent:
        built.append(ScriptedAgent(ScriptedChatClient(["1"], cycle=True)))
        return built[-1]

    engine = RolloutEngine(env_factories={"guess": GuessNumberEnv})
    spec = ProtocolSpec("single_agent", {"agent_factory": make_agent})
    request = RolloutRequest(EnvSpec("guess", {"max_number": 1}), spec, env_seed=0)
    result = await engine.generate_rollouts([request, request], RolloutSettings(max_steps=1))
    assert [r.total_reward for r in result.rollouts] == [1.0, 1.0]
    assert len(built) == 2 and built[0] is not built[1]
    assert result.rollouts[0].meta["protocol"] == "single_agent"


async def test_multi_agent_spec_runs_through_the_engine() -> None:
    client = ScriptedChatClient(["H"], cycle=True)
    spec = ProtocolSpec(
        "multi_agent",
        {"agent_factories": {"even": lambda: ScriptedAgent(client), "odd": lambda: ScriptedAgent(client)}},
    )
    engine = RolloutEngine(env_factories={"pennies": MatchingPenniesEnv})
    result = await engine.generate_rollouts(
        [RolloutRequest(EnvSpec("pennies"), spec)], RolloutSettings(max_steps=10)
    )
    assert not result.failed_episodes
    assert sorted(r.meta["agent_id"] for r in result.rollouts) == ["even", "odd"]


@pytest.mark.parametrize(
    ("spec", "patterns"),
    [
        (
            ProtocolSpec("single_agent"),
            [
                "protocol 'single_agent' needs kwarg 'agent_factory'",
                "JSON kwargs cannot carry",
                r'protocol_factories=\{"single_agent":',
                r'ProtocolSpec\("single_agent", \{"agent_factory":',
            ],
        ),
        (
            ProtocolSpec("multi_agent", {"stop_on_parse_error": True}),
            ["needs kwarg 'agent_factories'", r'protocol_factories=\{"multi_agent":'],
        ),
        (
            ProtocolSpec("single_agent", {"agent": object()}),
            ["kwarg 'agent' would share agent instances", "pass 'agent_factory'"],
        ),
        (
            ProtocolSpec("single_agent", {"agent_factory": ScriptedAgent(ScriptedChatClient(["1"]))}),
            ["agent_factory is an agent instance", "ScriptedAgent", "fresh agent per episode"],
        ),
        (
            ProtocolSpec("single_agent", {"agent_factory": lambda: None, "stop_on_parse_errors": True}),
            [r"unknown kwargs \['stop_on_parse_errors'\]"],
        ),
        (
            ProtocolSpec("multi_agent", {"agent_factories": {"even": "agent"}}),
            [r"agent_factories\['even'\] is not callable"],
        ),
    ],
)
async def test_standard_protocol_specs_without_an_agent_factory_fail_before_any_episode(
    spec: ProtocolSpec, patterns: list[str]
) -> None:
    engine = RolloutEngine(env_factories={"guess": GuessNumberEnv})
    with pytest.raises(ConfigError) as info:
        await engine.generate_rollouts([RolloutRequest(EnvSpec("guess"), spec)], RolloutSettings(max_steps=1))
    for pattern in patterns:
        assert re.search(pattern, str(info.value)), (pattern, str(info.value))
    assert engine.episodes_started == 0


async def test_a_factory_registered_on_the_engine_replaces_the_standard_one() -> None:
    client = ScriptedChatClient(["1"], cycle=True)
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single_agent": lambda **kw: SingleAgentProtocol(ScriptedAgent(client), **kw)},
    )
    request = RolloutRequest(
        EnvSpec("guess", {"max_number": 1}), ProtocolSpec("single_agent", {"stop_on_parse_error": True})
    )
    result = await engine.generate_rollouts([request], RolloutSettings(max_steps=1))
    assert result.rollouts[0].total_reward == 1.0
