"""Conformance checks for agents and weight publishers, beside :func:`check_env` and :func:`check_client`.

    from ludic_core.testing import check_agent, check_publisher
    await check_agent(lambda: MyAgent(client=client), observations=["Board: ...", "Your move."])
    await check_publisher(MyPublisher(...), named_tensors={"w": tensor}, version_source=client)

Each raises :class:`~ludic_core.errors.ConformanceError` listing every problem found. They play the
contracts the protocols and trainers rely on, so a third-party harness or runtime can prove it plugs in
before a long run finds out.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ludic_core.errors import ConformanceError
from ludic_core.harness import ActOptions, AgentActResult, AgentHarness
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams, VersionedClient
from ludic_core.publisher import PolicyPublisher
from ludic_core.types import TokenTrace
from ludic_core.validation import check_bool

__all__ = ["check_agent", "check_publisher"]

_TARGETS = ("env", "external", "internal")


def _trace_problems(label: str, trace: object, logprobs_expected: bool) -> list[str]:
    if not isinstance(trace, TokenTrace):
        return [f"{label}: trace is {type(trace).__name__}, expected a TokenTrace"]
    problems = []
    if not trace.prompt_token_ids:
        problems.append(f"{label}: the prompt has no token ids")
    if logprobs_expected:
        if trace.completion_logprobs is None:
            problems.append(
                f"{label}: the inference spec asked for chosen-token logprobs, none were recorded"
            )
        elif any(not math.isfinite(lp) or lp > 1e-6 for lp in trace.completion_logprobs):
            problems.append(f"{label}: completion logprobs must be finite and <= 0")
    return problems


async def _act(
    agent: AgentHarness,
    label: str,
    inference: InferenceSpec,
    seed: int,
    timeout_s: float,
    problems: list[str],
) -> AgentActResult | None:
    try:
        result = await asyncio.wait_for(agent.act(ActOptions(inference, seed, timeout_s)), timeout_s * 2)
    except TimeoutError:
        problems.append(f"{label}: act did not return within {timeout_s * 2:g}s (twice its timeout_s)")
        return None
    if not isinstance(result, AgentActResult):
        problems.append(f"{label}: act returned {type(result).__name__}, expected an AgentActResult")
        return None
    logprobs = inference.return_.return_chosen_logprobs
    for i, step in enumerate(result.steps):
        problems.extend(_trace_problems(f"{label} step {i}", step.trace, logprobs))
    final = result.final_step
    if final.action_target not in _TARGETS:
        problems.append(f"{label}: final action_target {final.action_target!r} is not one of {_TARGETS}")
    return result


def _first_prompt(result: AgentActResult | None) -> tuple[int, ...] | None:
    return None if result is None else result.steps[0].trace.prompt_token_ids


async def check_agent(
    agent_factory: Callable[[], AgentHarness],
    *,
    observations: Sequence[str] = ("Start.", "Next."),
    system_prompt: str | None = "You are a test agent.",
    seed: int = 7,
    timeout_s: float = 60.0,
    deterministic_with_seed: bool = True,
) -> None:
    """Play the :class:`~ludic_core.harness.AgentHarness` contract with fresh agents from ``agent_factory``.

    Checks: a fresh agent per call (two agents set up side by side share no dialog); ``act`` returns an
    :class:`AgentActResult` whose every step carries a token trace (chosen-token logprobs when the
    inference spec asks for them) and a final ``action_target`` the protocols know; an ``env`` step
    carries its parse result; an observation fed with ``on_after_step`` reaches the next prompt (a
    different observation gives a different prompt); ``reset`` starts over (the first prompt after a reset equals a fresh agent's); and, with
    ``deterministic_with_seed``, two fresh agents given the same seed make the same calls.
    """
    if not observations:
        raise ConformanceError("check_agent needs at least one observation")
    problems: list[str] = []
    first, second = agent_factory(), agent_factory()
    if first is second:
        raise ConformanceError(
            "check_agent: agent_factory returned the same object twice; protocols need a fresh agent per "
            "episode (an agent keeps its dialog)"
        )
    if not isinstance(first, AgentHarness):
        raise ConformanceError(
            f"check_agent: {type(first).__name__} lacks AgentHarness methods "
            "(default_system_prompt, reset, on_env_reset, act, on_after_step, on_tool_results)"
        )
    inference = InferenceSpec(sampling=SamplingParams(max_tokens=16), return_=ReturnSpec.for_rl())

    async def episode(
        agent: AgentHarness, label: str, obs_seq: Sequence[str] = observations
    ) -> list[AgentActResult | None]:
        agent.reset(system_prompt=system_prompt)
        agent.on_env_reset(obs_seq[0], {})
        results = [await _act(agent, f"{label} turn 0", inference, seed, timeout_s, problems)]
        for turn, obs in enumerate(obs_seq[1:], start=1):
            agent.on_after_step(obs, {})
            results.append(
                await _act(agent, f"{label} turn {turn}", inference, seed + turn, timeout_s, problems)
            )
        return results

    played = await episode(first, "agent")
    if len(observations) > 1:
        # Same dialog but for the second observation: if the next prompt does not change, the
        # observation never reached the model.
        other = [observations[0], f"{observations[1]} (a different observation)", *observations[2:]]
        probe = await episode(agent_factory(), "probe agent", other)
        if _first_prompt(probe[1]) is not None and _first_prompt(probe[1]) == _first_prompt(played[1]):
            problems.append(
                "turn 1: a different observation fed with on_after_step left the next prompt unchanged: "
                "the observation never reached the model"
            )
    # Two agents set up side by side, as concurrent episodes are: the first one's prompt must not see
    # the second one's dialog.
    interleaved, neighbour = agent_factory(), agent_factory()
    interleaved.reset(system_prompt=system_prompt)
    interleaved.on_env_reset(observations[0], {})
    neighbour.reset(system_prompt=None)
    neighbour.on_env_reset(f"{observations[0]} (another episode)", {})
    side_by_side = await _act(interleaved, "interleaved agent turn 0", inference, seed, timeout_s, problems)
    if _first_prompt(side_by_side) != _first_prompt(played[0]):
        problems.append(
            "an agent set up beside another one prompts differently from an agent alone: state is shared "
            "between agents (concurrent episodes would mix their dialogs)"
        )
    fresh = await episode(second, "second agent")
    if deterministic_with_seed:
        calls = [[s.trace.completion_token_ids for s in r.steps] if r else None for r in played]
        again = [[s.trace.completion_token_ids for s in r.steps] if r else None for r in fresh]
        if calls != again:
            problems.append("two fresh agents given the same seeds made different completions")
    replay = await episode(first, "reset agent")
    if _first_prompt(replay[0]) != _first_prompt(played[0]):
        problems.append("after reset, the first prompt differs from a fresh agent's: reset kept old dialog")
    if problems:
        raise ConformanceError("agent contract violations:\n- " + "\n- ".join(problems))


async def check_publisher(
    publisher: PolicyPublisher,
    *,
    named_tensors: Mapping[str, Any],
    versions: Sequence[int] = (1, 2),
    version_source: VersionedClient | None = None,
    timeout_s: float = 120.0,
) -> None:
    """Play the :class:`~ludic_core.publisher.PolicyPublisher` contract on ``publisher``.

    Checks: ``publish(named_tensors, version=v)`` completes within ``timeout_s`` for each of the
    increasing ``versions`` (a publisher whose runtime shares the trainer's parameters,
    ``shares_trainer_weights = True``, gets an empty mapping, as the trainer sends it); with a
    ``version_source`` (the runtime's client), the runtime then serves exactly that version; and
    ``aclose`` can be called twice. The publisher is closed at the end.
    """
    if list(versions) != sorted(set(versions)) or not versions:
        raise ConformanceError(
            f"check_publisher: versions must be increasing and non-empty, got {list(versions)}"
        )
    if not isinstance(publisher, PolicyPublisher):
        raise ConformanceError(f"check_publisher: {type(publisher).__name__} has no async publish/aclose")
    shares = getattr(publisher, "shares_trainer_weights", False)
    check_bool("shares_trainer_weights", shares, error=ConformanceError)
    payload: Mapping[str, Any] = {} if shares else named_tensors
    problems: list[str] = []
    try:
        for version in versions:
            try:
                await asyncio.wait_for(publisher.publish(payload, version=version), timeout_s)
            except TimeoutError:
                problems.append(f"publish(version={version}) did not complete within {timeout_s:g}s")
                break
            if version_source is not None:
                served = await asyncio.wait_for(version_source.get_policy_version(), timeout_s)
                if served != version:
                    problems.append(f"after publish(version={version}) the runtime serves version {served!r}")
    finally:
        await asyncio.wait_for(publisher.aclose(), timeout_s)
    try:
        await asyncio.wait_for(publisher.aclose(), timeout_s)
    except Exception as exc:  # a second close must be a no-op, not an error
        problems.append(f"a second aclose() raised {type(exc).__name__}: {exc}")
    if problems:
        raise ConformanceError("publisher contract violations:\n- " + "\n- ".join(problems))
