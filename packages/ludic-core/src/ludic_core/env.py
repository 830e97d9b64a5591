"""The environment contract: a pure state machine over agent ids.

Envs see parsed actions (strings) and return observations (strings). They never see tokens, prompts,
tool calls or model outputs that failed to parse: those stay between the agent and the protocol.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from ludic_core.errors import ProtocolError
from ludic_core.logs import get_logger
from ludic_core.threads import run_in_daemon_thread
from ludic_core.types import Info, StepOutcome

__all__ = ["SLOW_SYNC_STEP_S", "LudicEnv", "SingleAgentEnv", "timed_sync_step"]

log = get_logger(__name__)

SLOW_SYNC_STEP_S = 1.0
"""A synchronous step (on the event loop) that takes longer than this is reported, once per env class:
no other episode ran meanwhile and no episode timeout could fire."""
_REPORTED_SLOW: set[type] = set()

A = TypeVar("A")
R = TypeVar("R")


def timed_sync_step(env: Any, step: Callable[[A], R], action: A) -> R:
    """``step(action)`` (a synchronous env step on the event loop), reported when it held the loop for
    more than :data:`SLOW_SYNC_STEP_S`, naming the env and the fix."""
    start = time.perf_counter()
    try:
        return step(action)
    finally:
        held = time.perf_counter() - start
        if held > SLOW_SYNC_STEP_S and type(env) not in _REPORTED_SLOW:
            _REPORTED_SLOW.add(type(env))
            log.warning(
                "env.step_blocked_the_event_loop",
                env=type(env).__name__,
                held_s=round(held, 3),
                fix=(
                    f"{type(env).__name__}.step ran on the event loop for {held:.1f} s: no other episode "
                    "ran and no episode timeout could fire meanwhile. Set blocking_step = True on the env "
                    "class (its step then runs in a worker thread) or override astep for I/O waits"
                ),
            )


AgentID = TypeVar("AgentID", bound=str)


class LudicEnv(abc.ABC, Generic[AgentID]):
    """Multi-agent env kernel.

    * ``agent_ids``: every agent that can ever act;
    * ``active_agents``: the agents expected to act in the next :meth:`step` (one for turn-based
      games, several for simultaneous moves, none when only built-in bots move);
    * ``reset(seed=...)`` returns ``{agent_id: (obs, info)}`` for the agents that observe the start;
    * ``step({agent_id: action})`` returns ``{agent_id: StepOutcome}`` for every agent whose view
      changed, acting or not (e.g. the loser of a turn-based game gets its terminal outcome on the
      winner's move).

    Envs must be deterministic given the seed and must keep their own RNG (never the global one).

    ``blocking_step``: set it to ``True`` on an env whose synchronous ``step`` can block for long
    (grading in a subprocess, a simulator call, heavy CPU work). The default :meth:`astep` then runs
    ``step`` in a worker thread, so the event loop keeps serving other episodes and the engine's
    ``episode_timeout_s`` still fires while the step is stuck (the abandoned step finishes in a daemon
    thread). Cheap steps stay on the loop: a thread hop per step would cost more than the step.
    """

    blocking_step: bool = False

    @property
    @abc.abstractmethod
    def agent_ids(self) -> list[AgentID]: ...

    @property
    @abc.abstractmethod
    def active_agents(self) -> list[AgentID]: ...

    @abc.abstractmethod
    def reset(self, *, seed: int | None = None) -> dict[AgentID, tuple[str, Info]]: ...

    @abc.abstractmethod
    def step(self, actions: Mapping[AgentID, str]) -> dict[AgentID, StepOutcome]: ...

    async def astep(self, actions: Mapping[AgentID, str]) -> dict[AgentID, StepOutcome]:
        """What protocols call. Defaults to :meth:`step`; override it in envs that wait on I/O (a code
        sandbox, a remote simulator) so that other episodes keep running on the event loop meanwhile.
        With ``blocking_step`` set, ``step`` runs in a worker thread."""
        if self.blocking_step:
            return await run_in_daemon_thread(lambda: self.step(actions), name=f"{self.name}.step")
        return timed_sync_step(self, self.step, actions)

    @property
    def suggested_sysprompt(self) -> str | None:
        """A system prompt the env recommends; the agent's own default takes precedence."""
        return None

    @property
    def name(self) -> str:
        return type(self).__name__


class SingleAgentEnv(LudicEnv[str]):
    """Gym-like single-agent env. Implement :meth:`env_reset` and :meth:`env_step`."""

    def __init__(self, *, agent_id: str = "agent_0") -> None:
        self._agent_id = agent_id

    @property
    def agent_id(self) -> str:
        return self._agent_id

    @property
    def agent_ids(self) -> list[str]:
        return [self._agent_id]

    @property
    def active_agents(self) -> list[str]:
        return [self._agent_id]

    @abc.abstractmethod
    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]: ...

    @abc.abstractmethod
    def env_step(self, action: str) -> StepOutcome: ...

    def reset(self, *, seed: int | None = None) -> dict[str, tuple[str, Info]]:
        return {self._agent_id: self.env_reset(seed=seed)}

    async def aenv_step(self, action: str) -> StepOutcome:
        """Async twin of :meth:`env_step` (see :meth:`LudicEnv.astep`); defaults to ``env_step``, in a
        worker thread when ``blocking_step`` is set."""
        if self.blocking_step:
            return await run_in_daemon_thread(lambda: self.env_step(action), name=f"{self.name}.env_step")
        return timed_sync_step(self, self.env_step, action)

    def _single_action(self, actions: Mapping[str, str]) -> str:
        if len(actions) == 1 and self._agent_id in actions:  # every well-formed call: no set algebra
            action = actions[self._agent_id]
            if not isinstance(action, str):
                raise ProtocolError(
                    f"{self.name}.step: the action for {self._agent_id!r} must be a str (what the agent's "
                    f"parser returns), got {type(action).__name__} {action!r}"
                )
            return action
        unknown = set(actions) - {self._agent_id}
        if unknown:
            raise ProtocolError(
                f"{self.name} has the single agent {self._agent_id!r}; got actions for {sorted(unknown)}"
            )
        raise ProtocolError(f"{self.name}.step needs an action for {self._agent_id!r}; got {dict(actions)!r}")

    def step(self, actions: Mapping[str, str]) -> dict[str, StepOutcome]:
        return {self._agent_id: self.env_step(self._single_action(actions))}

    async def astep(self, actions: Mapping[str, str]) -> dict[str, StepOutcome]:
        return {self._agent_id: await self.aenv_step(self._single_action(actions))}
