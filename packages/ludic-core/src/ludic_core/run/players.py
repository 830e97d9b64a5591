"""Who plays a run's episodes (``ludic eval``, ``ludic rollouts``, the RL recipes): the run config's
``protocol``, with the policy's ``agent`` in every seat.

* ``agent``: a registered agent (entry-point group ``ludic.agents``), one fresh per seat and episode,
  built on the backend's client with the env profile's parser, the run's system prompt and
  ``agent_kwargs`` (its JSON options). ``chat`` (the default) is the backend's own agent.
* ``protocol``: a registered protocol (``ludic.protocols``) called with ``agent_factories`` (each agent
  id of the env -> a callable returning a fresh agent of the policy) and ``stop_on_parse_error`` (the
  env profile's). ``single_agent`` (the default) plays an env with one agent; ``multi_agent`` plays
  the policy in every seat (self-play), each seat leaving its own rollout, which group-relative credit
  compares only with the same seat's rollouts of its group. A protocol of another package takes the
  same two keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ludic_core.errors import ConfigError
from ludic_core.parsing import Parser
from ludic_core.protocols.base import InteractionProtocol
from ludic_core.protocols.standard import StandardProtocolFactory
from ludic_core.registry import AGENTS, PROTOCOLS
from ludic_core.run.backends import CHAT_AGENT, Backend

__all__ = ["check_players", "protocol_factory"]


def _seats_one(protocol: str) -> bool:
    factory = PROTOCOLS.get(protocol)
    if isinstance(factory, StandardProtocolFactory) and factory.agents == "delegating":
        raise ConfigError(
            f"protocol = {protocol!r} needs a child agent and a child env, which a run config cannot name; "
            "register a protocol that builds them from agent_factories (see ludic_core.run.players)"
        )
    return isinstance(factory, StandardProtocolFactory) and factory.agents == "single"


def check_players(protocol: str, agent: str, agent_ids: list[str] | None = None) -> None:
    """Refuse an unregistered ``protocol`` or ``agent``, a protocol the run layer cannot seat, and
    (given the env's ``agent_ids``) ``single_agent`` on an env with several agents."""
    PROTOCOLS.check(protocol, field="protocol")
    # The backend builds its own agent: the light install's openai backend needs no ludic-agents.
    if agent != CHAT_AGENT:
        AGENTS.check(agent, field="agent")
    if _seats_one(protocol) and agent_ids is not None and len(agent_ids) != 1:
        raise ConfigError(
            f"protocol = {protocol!r} plays one agent, and the env has agents {agent_ids}: set "
            "protocol = 'multi_agent' to play the policy in every seat"
        )


def protocol_factory(
    *,
    protocol: str,
    agent: str,
    agent_kwargs: Mapping[str, Any],
    build_env: Callable[[], Any],
    backend: Backend,
    parser: Parser,
    system_prompt: str | None,
    stop_on_parse_error: bool,
) -> Callable[[], InteractionProtocol]:
    """A callable returning each episode's protocol: ``protocol`` with ``backend``'s ``agent`` in
    every seat of the env (see the module docstring); ``build_env()`` builds the env, once, to learn
    its seats when the protocol has several."""
    check_players(protocol, agent)
    single = _seats_one(protocol)
    agent_ids = None if single else list(build_env().agent_ids)
    if agent == CHAT_AGENT and not agent_kwargs:
        make_agent = backend.agent_factory(parser=parser, system_prompt=system_prompt)
    else:
        # Only then: a backend written before agents were chosen by config still plays the default.
        make_agent = backend.agent_factory(
            parser=parser, system_prompt=system_prompt, agent=agent, agent_kwargs=dict(agent_kwargs)
        )
    build = PROTOCOLS.get(protocol)
    if single:
        seats: dict[str, Any] = {"agent_factory": make_agent}
    else:
        seats = {"agent_factories": dict.fromkeys(agent_ids or (), make_agent)}

    def make() -> InteractionProtocol:
        built: InteractionProtocol = build(**seats, stop_on_parse_error=stop_on_parse_error)
        return built

    return make
