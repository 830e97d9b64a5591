"""One agent turn attempt, including the round trips to an external tool handler.

Shared by both protocols so that external tools, seeds and failure attribution behave the same with
one agent or many.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ludic_core.env import LudicEnv, SingleAgentEnv, timed_sync_step
from ludic_core.errors import LudicTimeoutError, ProtocolError, TransportError
from ludic_core.harness import ActOptions, AgentActResult, AgentActStep, AgentHarness, ExternalToolHandler
from ludic_core.protocols.base import EpisodeRun
from ludic_core.protocols.timeline import AgentTimeline
from ludic_core.types import EpisodeFailure, StepOutcome, ToolResult

__all__ = [
    "EpisodeStageError",
    "act_with_external_tools",
    "always_active",
    "direct_env_step",
    "direct_step",
    "failure_from",
]


class EpisodeStageError(Exception):
    """Internal: carries which stage of the loop (env, agent, tool, protocol) raised."""

    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(f"{stage}: {error!r}")
        self.stage = stage
        self.error = error


def failure_from(exc: BaseException, default_stage: str = "protocol") -> EpisodeFailure:
    stage, error = default_stage, exc
    if isinstance(exc, EpisodeStageError):
        stage, error = exc.stage, exc.error
    if stage == "agent" and isinstance(error, (TimeoutError, LudicTimeoutError)):
        stage = "timeout"
    elif stage == "agent" and isinstance(error, TransportError):
        stage = "client"
    return EpisodeFailure.from_exception(stage, error)


@functools.lru_cache(maxsize=256)
def _defaults_kept(cls: type[Any]) -> tuple[bool, bool, bool]:
    """Which shortcuts an env class allows; it depends on the class only (which methods it overrides),
    so the episodes of one class share the answer instead of asking the class hierarchy each time:
    (awaiting ``astep`` only calls ``step``; ``step`` only checks the action and calls ``env_step``;
    its one agent is always active)."""
    single = issubclass(cls, SingleAgentEnv)
    single_steps = (
        single
        and cls.astep is SingleAgentEnv.astep
        and cls.aenv_step is SingleAgentEnv.aenv_step
        and cls.step is SingleAgentEnv.step
    )
    return (
        cls.astep is LudicEnv.astep or single_steps,
        single_steps and cls._single_action is SingleAgentEnv._single_action,
        single
        and cls.active_agents is SingleAgentEnv.active_agents
        and cls.agent_ids is SingleAgentEnv.agent_ids,
    )


def direct_step(env: LudicEnv[Any]) -> Callable[[Mapping[str, str]], dict[str, StepOutcome]] | None:
    """``env.step`` when awaiting ``env.astep`` would only call it, else None (await ``astep``).

    The default ``astep`` of :class:`LudicEnv` (and ``astep``/``aenv_step`` of :class:`SingleAgentEnv`)
    of an env without ``blocking_step`` only wraps the synchronous step in one or two coroutines; a
    protocol that asks once per episode calls the step itself. An env that overrides ``astep`` or
    ``aenv_step`` (it waits on I/O) or sets ``blocking_step`` is always awaited.
    """
    if env.blocking_step or not _defaults_kept(type(env))[0]:
        return None
    return functools.partial(timed_sync_step, env, env.step)


def direct_env_step(env: LudicEnv[Any]) -> Callable[[str], StepOutcome] | None:
    """For a :class:`SingleAgentEnv` stepped on the loop whose ``step``, ``astep``, ``aenv_step`` and
    action check are the defaults: its ``env_step``, timed. That is the one call ``step`` makes after
    checking the action and wrapping it and the outcome in a dict each; a caller that passes a ``str``
    action (what the default check requires) skips the rest. Otherwise None."""
    if env.blocking_step or not _defaults_kept(type(env))[1]:
        return None
    return functools.partial(timed_sync_step, env, env.env_step)  # type: ignore[attr-defined]


def always_active(env: LudicEnv[Any]) -> bool:
    """Whether ``env`` lists its one agent as active on every step without being asked: a
    :class:`SingleAgentEnv` with the default ``agent_ids`` and ``active_agents``."""
    return _defaults_kept(type(env))[2]


def _not_a_result(result: object) -> EpisodeStageError:
    return EpisodeStageError(
        "agent", ProtocolError(f"agent.act must return an AgentActResult, got {type(result).__name__}")
    )


async def _run_handler(handler: ExternalToolHandler, step: AgentActStep) -> list[ToolResult]:
    calls = step.tool_calls or ()
    try:
        out = handler(calls)
        results: Sequence[ToolResult] = await out if inspect.isawaitable(out) else out
    except Exception as exc:
        raise EpisodeStageError("tool", exc) from exc
    results = list(results)
    wanted = {c.id for c in calls}
    got = {r.tool_call_id for r in results}
    if wanted - got:
        raise EpisodeStageError(
            "tool",
            ProtocolError(f"external tool handler returned no result for tool calls {sorted(wanted - got)}"),
        )
    return results


async def act_with_external_tools(
    agent: AgentHarness,
    timeline: AgentTimeline,
    episode: EpisodeRun,
    *,
    attempt: int,
    external_tool_handler: ExternalToolHandler | None,
    stop_on_parse_error: bool,
    max_external_rounds: int,
) -> AgentActStep:
    """Run ``act``; while it hands back external tool calls, run them and ``act`` again (same turn).

    Each trace keeps the temperature its client reported sampling at (the ``ChatClient`` contract,
    checked by :func:`ludic_core.testing.check_client`); nothing here guesses one.
    """
    rounds = 0
    while True:
        # The agent is awaited here, not through a helper coroutine: one coroutine less per model call.
        seed = timeline.call_seed(episode.sampling_seed, attempt, rounds)
        try:
            result = await agent.act(ActOptions._of(episode.inference, seed, episode.timeout_s))
        except Exception as exc:
            raise EpisodeStageError("agent", exc) from exc
        if not isinstance(result, AgentActResult):
            raise _not_a_result(result)
        timeline.record_act(result, stop_on_parse_error=stop_on_parse_error)
        final = result.steps[-1]
        if final.action_target != "external":
            return final
        if external_tool_handler is None:
            names = [c.name for c in final.tool_calls or ()]
            raise EpisodeStageError(
                "protocol",
                ProtocolError(
                    f"agent {timeline.agent_id!r} called external tools {names} but the protocol has no "
                    "external_tool_handler"
                ),
            )
        rounds += 1
        if rounds > max_external_rounds:
            raise EpisodeStageError(
                "protocol",
                ProtocolError(
                    f"agent {timeline.agent_id!r} exceeded max_external_rounds={max_external_rounds}"
                ),
            )
        tool_results = await _run_handler(external_tool_handler, final)
        timeline.attach_tool_results(tool_results)
        try:
            agent.on_tool_results(tool_results)
        except Exception as exc:
            raise EpisodeStageError("agent", exc) from exc
