"""The standard protocols as registry factories: ``ProtocolSpec("single_agent")``, ``("multi_agent")``,
``("delegating")``.

A protocol needs agents, and an agent holds a model client, which ``ProtocolSpec`` kwargs cannot carry
as JSON. So the registered factories take a callable that builds a **fresh** agent per episode (an
agent keeps its dialog between turns, so one instance shared by concurrent episodes would mix them),
plus the protocol's own options::

    ProtocolSpec("single_agent", {"agent_factory": lambda: Agent(client=client, parser=parser)})
    ProtocolSpec("multi_agent", {"agent_factories": {"X": make_x, "O": make_o}})
    ProtocolSpec("delegating", {"agent_factory": make_parent, "child_agent_factory": make_child})

For requests that must stay plain JSON (configs, logs), register a factory under the name on the
engine instead; it takes precedence over the registry and receives the spec's JSON kwargs::

    RolloutEngine(
        protocol_factories={"single_agent": lambda **kw: SingleAgentProtocol(Agent(...), **kw)},
    )

The engine calls :meth:`StandardProtocolFactory.check_kwargs` when it resolves the requests, so a
missing agent factory is a :class:`~ludic_core.errors.ConfigError` before any episode starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError
from ludic_core.harness import AgentHarness
from ludic_core.protocols.base import InteractionProtocol
from ludic_core.protocols.delegating import DelegatingProtocol, DelegationSettings, check_child_env_factory
from ludic_core.protocols.multi_agent import MultiAgentProtocol
from ludic_core.protocols.single_agent import SingleAgentProtocol

__all__ = ["DELEGATING", "MULTI_AGENT", "SINGLE_AGENT", "StandardProtocolFactory"]

AgentsKind = Literal["single", "multi", "delegating"]

_LOOP_OPTIONS = frozenset({"stop_on_parse_error", "external_tool_handler", "max_external_rounds"})
_OPTIONS: dict[str, frozenset[str]] = {
    "single": _LOOP_OPTIONS,
    "multi": _LOOP_OPTIONS,
    "delegating": _LOOP_OPTIONS | {"child_env_factory", "settings"},
}


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_agent_factory(protocol: str, where: str, factory: object) -> None:
    if isinstance(factory, AgentHarness) or not callable(factory):
        what = "an agent instance" if isinstance(factory, AgentHarness) else "not callable"
        raise ConfigError(
            f"protocol {protocol!r}: {where} is {what} ({type(factory).__name__}: {_short_repr(factory)}); "
            "expected a callable returning a fresh agent per episode, e.g. "
            "`lambda: Agent(client=client, parser=parser)`"
        )


def _build_agent(protocol: str, where: str, factory: Callable[[], Any]) -> AgentHarness:
    agent = factory()
    if not isinstance(agent, AgentHarness):
        raise ConfigError(
            f"protocol {protocol!r}: {where}() returned {type(agent).__name__}: {_short_repr(agent)}, "
            "which is not an AgentHarness (reset, on_env_reset, act, on_after_step, on_tool_results)"
        )
    return agent


@attrs.frozen
class StandardProtocolFactory:
    """Builds :class:`SingleAgentProtocol` (``agents="single"``, kwarg ``agent_factory``),
    :class:`MultiAgentProtocol` (``agents="multi"``, kwarg ``agent_factories``: agent id -> factory) or
    :class:`DelegatingProtocol` (``agents="delegating"``, kwargs ``agent_factory`` for the parent and
    ``child_agent_factory``, which the protocol calls for every delegate call; ``settings`` may be a
    mapping of :class:`DelegationSettings` fields) from a spec's kwargs; the remaining kwargs are the
    protocol's options."""

    name: str
    agents: AgentsKind = attrs.field(validator=attrs.validators.in_(("single", "multi", "delegating")))

    @property
    def _agent_key(self) -> str:
        return "agent_factories" if self.agents == "multi" else "agent_factory"

    @property
    def _required(self) -> tuple[str, ...]:
        if self.agents == "delegating":
            return (self._agent_key, "child_agent_factory")
        return (self._agent_key,)

    def _how_to(self) -> str:
        if self.agents == "single":
            spec = (
                'ProtocolSpec("single_agent", {"agent_factory": lambda: Agent(client=client, parser=parser)})'
            )
            registered = (
                'RolloutEngine(protocol_factories={"single_agent": '
                "lambda **kw: SingleAgentProtocol(Agent(client=client, parser=parser), **kw)})"
            )
        elif self.agents == "multi":
            spec = 'ProtocolSpec("multi_agent", {"agent_factories": {"X": make_x_agent, "O": make_o_agent}})'
            registered = (
                'RolloutEngine(protocol_factories={"multi_agent": '
                'lambda **kw: MultiAgentProtocol({"X": make_x_agent(), "O": make_o_agent()}, **kw)})'
            )
        else:
            spec = (
                'ProtocolSpec("delegating", {"agent_factory": make_parent_agent, '
                '"child_agent_factory": make_child_agent})'
            )
            registered = (
                'RolloutEngine(protocol_factories={"delegating": lambda **kw: DelegatingProtocol('
                "make_parent_agent(), child_agent_factory=make_child_agent, **kw)})"
            )
        return (
            "an agent holds a model client, which JSON kwargs cannot carry; either pass a factory in the "
            f"spec, {spec}, or register a factory under that name on the engine, {registered}"
        )

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """Raise :class:`ConfigError` unless ``kwargs`` can build this protocol."""
        key = self._agent_key
        if "agent" in kwargs or "agents" in kwargs:
            given = "agent" if "agent" in kwargs else "agents"
            raise ConfigError(
                f"protocol {self.name!r}: kwarg {given!r} would share agent instances between episodes "
                f"(agents keep their dialog); pass {key!r} instead: {self._how_to()}"
            )
        options = _OPTIONS[self.agents]
        required = self._required
        unknown = sorted(set(kwargs) - options - set(required))
        if unknown:
            takes = " and ".join(repr(k) for k in required)
            raise ConfigError(
                f"protocol {self.name!r}: unknown kwargs {unknown}; it takes {takes} and {sorted(options)}"
            )
        for needed in required:
            if needed not in kwargs:
                raise ConfigError(f"protocol {self.name!r} needs kwarg {needed!r}: {self._how_to()}")
        if self.agents != "multi":
            for needed in required:
                _check_agent_factory(self.name, needed, kwargs[needed])
            if self.agents == "delegating":
                check_child_env_factory(kwargs.get("child_env_factory"))
                DelegationSettings.coerce(kwargs.get("settings", DelegationSettings()))
            return
        value = kwargs[key]
        if not isinstance(value, Mapping) or not value:
            raise ConfigError(
                f"protocol {self.name!r}: {key} must be a non-empty mapping of agent id -> agent factory, "
                f"got {type(value).__name__}: {_short_repr(value)}"
            )
        for agent_id, factory in value.items():
            if not isinstance(agent_id, str) or not agent_id:
                raise ConfigError(
                    f"protocol {self.name!r}: {key} keys must be non-empty str agent ids, got {agent_id!r}"
                )
            _check_agent_factory(self.name, f"{key}[{agent_id!r}]", factory)

    def __call__(self, **kwargs: Any) -> InteractionProtocol:
        self.check_kwargs(kwargs)
        options = {k: v for k, v in kwargs.items() if k in _OPTIONS[self.agents]}
        if self.agents == "single":
            agent = _build_agent(self.name, "agent_factory", kwargs["agent_factory"])
            return SingleAgentProtocol(agent, **options)
        if self.agents == "delegating":
            agent = _build_agent(self.name, "agent_factory", kwargs["agent_factory"])
            return DelegatingProtocol(agent, child_agent_factory=kwargs["child_agent_factory"], **options)
        agents = {
            agent_id: _build_agent(self.name, f"agent_factories[{agent_id!r}]", factory)
            for agent_id, factory in kwargs["agent_factories"].items()
        }
        return MultiAgentProtocol(agents, **options)


SINGLE_AGENT = StandardProtocolFactory(SingleAgentProtocol.name, "single")
"""Registered as ``"single_agent"``: ``ProtocolSpec("single_agent", {"agent_factory": ...})``."""

MULTI_AGENT = StandardProtocolFactory(MultiAgentProtocol.name, "multi")
"""Registered as ``"multi_agent"``: ``ProtocolSpec("multi_agent", {"agent_factories": {...}})``."""

DELEGATING = StandardProtocolFactory(DelegatingProtocol.name, "delegating")
"""Registered as ``"delegating"``: ``ProtocolSpec("delegating", {"agent_factory": ..., "child_agent_factory": ...})``."""
