"""One agent turn attempt, including the round trips to an external tool handler.

Shared by both protocols so that external tools, seeds and failure attribution behave the same with
one agent or many.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from ludic_core.errors import LudicTimeoutError, ProtocolError, TransportError
from ludic_core.harness import AgentActResult, AgentActStep, AgentHarness, ExternalToolHandler
from ludic_core.inference import InferenceSpec
from ludic_core.protocols.timeline import AgentTimeline
from ludic_core.types import EpisodeFailure, ToolResult

__all__ = ["EpisodeStageError", "act_with_external_tools", "failure_from"]


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


async def _call_agent(
    agent: AgentHarness,
    *,
    inference: InferenceSpec | None,
    sampling_seed: int | None,
    timeout_s: float | None,
) -> AgentActResult:
    try:
        result = await agent.act(inference=inference, sampling_seed=sampling_seed, timeout_s=timeout_s)
    except Exception as exc:
        raise EpisodeStageError("agent", exc) from exc
    if not isinstance(result, AgentActResult):
        raise EpisodeStageError(
            "agent", ProtocolError(f"agent.act must return an AgentActResult, got {type(result).__name__}")
        )
    return result


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
    *,
    attempt: int,
    external_tool_handler: ExternalToolHandler | None,
    inference: InferenceSpec | None,
    sampling_seed: int | None,
    timeout_s: float | None,
    stop_on_parse_error: bool,
    max_external_rounds: int,
) -> AgentActStep:
    """Run ``act``; while it hands back external tool calls, run them and ``act`` again (same turn).

    With ``inference`` given, the agent sampled with it: its temperature is recorded on the traces
    whose client reported none (a trainer must score the distribution the logprobs came from).
    """
    temperature = None if inference is None else inference.sampling.temperature
    result = await _call_agent(
        agent,
        inference=inference,
        sampling_seed=timeline.call_seed(sampling_seed, attempt, 0),
        timeout_s=timeout_s,
    )
    timeline.record_act(result, stop_on_parse_error=stop_on_parse_error, temperature=temperature)
    rounds = 0
    while result.final_step.action_target == "external":
        if external_tool_handler is None:
            names = [c.name for c in result.final_step.tool_calls or ()]
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
        tool_results = await _run_handler(external_tool_handler, result.final_step)
        timeline.attach_tool_results(tool_results)
        try:
            agent.on_tool_results(tool_results)
        except Exception as exc:
            raise EpisodeStageError("agent", exc) from exc
        result = await _call_agent(
            agent,
            inference=inference,
            sampling_seed=timeline.call_seed(sampling_seed, attempt, rounds),
            timeout_s=timeout_s,
        )
        timeline.record_act(result, stop_on_parse_error=stop_on_parse_error, temperature=temperature)
    return result.final_step
