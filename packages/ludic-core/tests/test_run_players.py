"""Who plays a run's episodes (:mod:`ludic_core.run.players`): the config's ``protocol`` with the
backend's ``agent`` in every seat. One policy in both seats of a two-player env leaves a rollout per
seat, which group-relative credit groups by (group, seat); registered agents get the config's JSON
options; a protocol of another package gets every seat's agent factory; a bad name or option is
refused naming the field and the value."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from core_test_envs import RaceToTenEnv

from ludic_core.credit import group_rollouts
from ludic_core.errors import ConfigError
from ludic_core.harness import AgentHarness
from ludic_core.inference import InferenceSpec
from ludic_core.parsing import Parser
from ludic_core.protocols import MultiAgentProtocol
from ludic_core.registry import AGENTS, ENVS, PROTOCOLS, Registry
from ludic_core.rollout_settings import RolloutSettings
from ludic_core.run.backends import CHAT_AGENT, OpenAIBackend, chat_agent_factory
from ludic_core.run.configs import BackendConfig, EpisodesConfig
from ludic_core.run.episodes import build_engine, build_requests, check_env_builds, first_request
from ludic_core.run.players import protocol_factory
from ludic_core.run.profiles import default_profile
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient

RACE, GUESS, AGENT, SEATS = "race_players_test", "guess_players_test", "counted_players_test", "seats_test"
SETTINGS = RolloutSettings(max_steps=20)


class ScriptedBackend:
    """A token-level backend whose client always says "1"; its own agent is a ScriptedAgent."""

    token_level = True

    def __init__(self) -> None:
        self.client = ScriptedChatClient(["1"], cycle=True)

    def agent_factory(
        self,
        *,
        parser: Parser,
        system_prompt: str | None,
        agent: str = CHAT_AGENT,
        agent_kwargs: Mapping[str, Any] | None = None,
    ) -> Callable[[], AgentHarness]:
        if agent == CHAT_AGENT:
            return lambda: ScriptedAgent(self.client, parser=parser, system_prompt=system_prompt)
        return chat_agent_factory(
            self.client, parser=parser, system_prompt=system_prompt, agent=agent, **(agent_kwargs or {})
        )

    async def aclose(self) -> None:
        return None


built_with: list[dict[str, Any]] = []


def counted_agent(*, client: Any, parser: Parser, system_prompt: str | None, penalty: float = -0.1) -> Any:
    built_with.append({"system_prompt": system_prompt, "penalty": penalty})
    return ScriptedAgent(
        client, parser=parser, system_prompt=system_prompt, incomplete_completion_penalty=penalty
    )


seated: list[dict[str, Any]] = []


def seats_protocol(
    *, agent_factories: Mapping[str, Callable[[], AgentHarness]], stop_on_parse_error: bool
) -> Any:
    seated.append({"seats": sorted(agent_factories), "stop_on_parse_error": stop_on_parse_error})
    return MultiAgentProtocol({seat: make() for seat, make in agent_factories.items()})


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    ENVS.register(RACE, RaceToTenEnv)
    ENVS.register(GUESS, GuessNumberEnv)
    AGENTS.register(AGENT, counted_agent)
    PROTOCOLS.register(SEATS, seats_protocol)
    built_with.clear()
    seated.clear()
    yield
    for registry, name in ((ENVS, RACE), (ENVS, GUESS), (AGENTS, AGENT), (PROTOCOLS, SEATS)):
        registry.unregister(name)


def _config(**fields: Any) -> EpisodesConfig:
    return EpisodesConfig(**{"env": RACE, "protocol": "multi_agent", "episodes": 2, **fields})


def _play(config: EpisodesConfig, *, samples: int = 1) -> list[Any]:
    engine = build_engine(config, backend=ScriptedBackend(), profile=default_profile(), rollout_log=None)
    requests = build_requests(
        env=config.env,
        env_kwargs=config.env_kwargs,
        episodes=config.episodes,
        samples_per_prompt=samples,
        seed=0,
        inference=InferenceSpec(),
    )
    return list(asyncio.run(engine.generate_rollouts(requests, SETTINGS)).rollouts)


def test_one_policy_plays_every_seat_and_each_seat_is_its_own_group() -> None:
    rollouts = _play(_config(), samples=3)
    assert len(rollouts) == 2 * 3 * 2  # prompts x samples x seats
    # The same policy in both seats: "1" every move, so b (moving second) reaches ten.
    assert {r.meta["agent_id"]: r.total_reward for r in rollouts} == {"a": -1.0, "b": 1.0}
    groups = group_rollouts(rollouts)
    assert sorted(groups) == [(f"prompt-{i}", seat) for i in range(2) for seat in ("a", "b")]
    assert all(len(members) == 3 for members in groups.values())


def test_a_registered_agent_is_built_with_the_configs_options_in_every_seat() -> None:
    config = _config(agent=AGENT, agent_kwargs={"penalty": -0.5}, system_prompt="Count.")
    rollouts = _play(config)
    assert len(rollouts) == 4 and all(not r.failed for r in rollouts)
    # One built when the engine is (to refuse bad options early), then one per seat and episode.
    assert len(built_with) == 1 + 2 * 2
    assert all(b == {"system_prompt": "Count.", "penalty": -0.5} for b in built_with)


def test_a_third_party_protocol_gets_every_seat_and_the_profiles_parse_rule() -> None:
    rollouts = _play(_config(protocol=SEATS))
    assert {r.meta["agent_id"] for r in rollouts} == {"a", "b"}
    assert seated[0] == {"seats": ["a", "b"], "stop_on_parse_error": default_profile().stop_on_parse_error}


def test_single_agent_stays_the_default() -> None:
    rollouts = _play(EpisodesConfig(env=GUESS, episodes=2, env_kwargs={"max_number": 3}))
    assert len(rollouts) == 2 and all(r.meta["protocol"] == "single_agent" for r in rollouts)


def _factory(config: EpisodesConfig, backend: Any = None) -> Any:
    return protocol_factory(
        protocol=config.protocol,
        agent=config.agent,
        agent_kwargs=config.agent_kwargs,
        build_env=lambda: ENVS.build(config.env, **config.env_kwargs),
        backend=backend or ScriptedBackend(),
        parser=default_profile().parser,
        system_prompt=None,
        stop_on_parse_error=True,
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"protocol": "multi_agnet"},
            "protocol = 'multi_agnet': not a registered protocol; did you mean 'multi_agent'? registered: ",
        ),
        ({"agent": "chatt"}, "agent = 'chatt': not a registered agent; "),
        ({"protocol": "delegating"}, "protocol = 'delegating' needs a child agent and a child env"),
        ({"agent": AGENT, "agent_kwargs": {"nope": 1}}, f"agent = {AGENT!r} with options ['nope']: "),
    ],
)
def test_bad_players_are_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _factory(_config(**fields))
    assert message in str(raised.value)


def test_an_env_that_cannot_be_built_to_seat_its_agents_is_refused_naming_its_kwargs() -> None:
    config = _config(env_kwargs={"size": 3})
    with pytest.raises(ConfigError) as raised:
        build_engine(config, backend=ScriptedBackend(), profile=default_profile(), rollout_log=None)
    assert f"env {RACE!r} with env_kwargs {{'size': 3}} could not be built: TypeError" in str(raised.value)


def test_single_agent_on_a_two_seat_env_is_refused_before_anything_runs() -> None:
    config = _config(protocol="single_agent")
    with pytest.raises(ConfigError) as raised:
        check_env_builds(first_request(config, default_profile()), config)
    assert "protocol = 'single_agent' plays one agent, and the env has agents ['a', 'b']: set " in str(
        raised.value
    )
    assert "protocol = 'multi_agent'" in str(raised.value)
    # Without the config the env alone is checked, as before.
    assert "2 agent(s) observe the start" in check_env_builds(first_request(config, default_profile()))


def test_the_openai_backend_refuses_an_agent_it_cannot_build() -> None:
    backend = OpenAIBackend(BackendConfig(model="m"))
    with pytest.raises(ConfigError) as raised:
        _factory(_config(env=GUESS, protocol="single_agent", agent=AGENT), backend)
    assert "backend.kind = 'openai' builds message-level chat agents only; agent = " in str(raised.value)
    assert "needs a token-level backend" in str(raised.value)
    _factory(_config(env=GUESS, protocol="single_agent"), backend)  # its own agent is fine


def test_the_backends_own_agent_needs_no_agent_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    # The light install (ludic-core and ludic-envs, no ludic-agents) evaluates through the openai
    # backend's own agent, so "chat" need not be registered; any other agent must be.
    import ludic_core.run.players as players

    monkeypatch.setattr(players, "AGENTS", Registry("agent", None))
    players.check_players("single_agent", CHAT_AGENT)
    with pytest.raises(ConfigError, match=r"agent = 'tool_chat': not a registered agent; registered: "):
        players.check_players("single_agent", "tool_chat")
