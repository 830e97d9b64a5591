"""Conformance checks that third-party envs and clients can run in their own test suites.

    from ludic_core.testing import check_env, check_client
    check_env(MyEnv(), actions=["A1", "B2", "junk"])
    await check_client(MyClient(), prompt_token_ids=[1, 2, 3])

Each raises :class:`~ludic_core.errors.ConformanceError` listing every problem found.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from ludic_core.env import LudicEnv
from ludic_core.errors import ConformanceError
from ludic_core.inference import (
    FINISH_REASONS,
    ChatClient,
    ReturnSpec,
    SamplingParams,
    TokenCompletionRequest,
)
from ludic_core.types import ChatResponse, StepOutcome

__all__ = ["check_client", "check_env"]

ActionPicker = Callable[[str, str, random.Random], str]
"""``(agent_id, last_obs, rng) -> action`` used by :func:`check_env` to play episodes."""


def _json_problem(where: str, value: Any) -> str | None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"{where} is not JSON-serialisable: {exc}"
    return None


def _play(
    env: LudicEnv[Any], seed: int, pick: ActionPicker, max_steps: int, problems: list[str]
) -> list[tuple[str, ...]]:
    """Play one episode; return a transcript used to compare runs."""
    rng = random.Random(seed)
    transcript: list[tuple[str, ...]] = []
    agent_ids = list(env.agent_ids)
    initial: Any = env.reset(seed=seed)
    if not isinstance(initial, dict):
        problems.append(f"reset must return a dict, got {type(initial).__name__}")
        return transcript
    last_obs: dict[str, str] = {}
    for aid, value in initial.items():
        if aid not in agent_ids:
            problems.append(f"reset returned an observation for unknown agent {aid!r}")
            continue
        if not (
            isinstance(value, tuple)
            and len(value) == 2
            and isinstance(value[0], str)
            and isinstance(value[1], dict)
        ):
            problems.append(f"reset()[{aid!r}] must be (obs: str, info: dict), got {value!r}")
            continue
        if (p := _json_problem(f"reset()[{aid!r}] info", value[1])) is not None:
            problems.append(p)
        last_obs[aid] = value[0]
        transcript.append(("reset", aid, value[0]))
    for _ in range(max_steps):
        active = list(env.active_agents)
        bad = [a for a in active if a not in agent_ids]
        if bad:
            problems.append(f"active_agents {bad} are not in agent_ids {agent_ids}")
            break
        if not active:
            break
        actions = {a: pick(a, last_obs.get(a, ""), rng) for a in active}
        outcomes: Any = env.step(actions)
        if not isinstance(outcomes, dict):
            problems.append(f"step must return a dict, got {type(outcomes).__name__}")
            break
        missing = [a for a in actions if a not in outcomes]
        if missing:
            problems.append(f"step({actions!r}) returned no outcome for acting agents {missing}")
        ended = True
        for aid, outcome in outcomes.items():
            if aid not in agent_ids:
                problems.append(f"step returned an outcome for unknown agent {aid!r}")
                continue
            if not isinstance(outcome, StepOutcome):
                problems.append(f"step()[{aid!r}] must be a StepOutcome, got {type(outcome).__name__}")
                continue
            if (p := _json_problem(f"step()[{aid!r}].info", outcome.info)) is not None:
                problems.append(p)
            last_obs[aid] = outcome.obs
            transcript.append(
                (
                    "step",
                    aid,
                    actions.get(aid, ""),
                    outcome.obs,
                    repr(outcome.reward),
                    str(outcome.terminated),
                    str(outcome.truncated),
                )
            )
            ended = ended and (outcome.terminated or outcome.truncated)
        if ended and outcomes:
            break
    return transcript


def check_env(
    env: LudicEnv[Any],
    *,
    actions: Sequence[str] | None = None,
    pick_action: ActionPicker | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    max_steps: int = 50,
) -> None:
    """Check the :class:`LudicEnv` contract: ids, reset/step shapes, JSON info, seeded determinism
    (same seed and actions → same transcript) and no use of the global ``random`` state."""
    problems: list[str] = []
    agent_ids = list(env.agent_ids)
    if (
        not agent_ids
        or len(set(agent_ids)) != len(agent_ids)
        or not all(isinstance(a, str) for a in agent_ids)
    ):
        problems.append(f"agent_ids must be a non-empty list of unique str, got {agent_ids!r}")
        raise ConformanceError("; ".join(problems))
    if pick_action is None:
        choices = list(actions or ["1", "A1", "yes", "", "0"])

        def pick_action(_aid: str, _obs: str, rng: random.Random) -> str:
            return rng.choice(choices)

    global_state = random.getstate()
    for seed in seeds:
        try:
            first = _play(env, seed, pick_action, max_steps, problems)
            second = _play(env, seed, pick_action, max_steps, problems)
        except Exception as exc:
            problems.append(f"seed {seed}: the env raised {type(exc).__name__}: {exc}")
            continue
        if first != second:
            diverge = next((i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), None)
            problems.append(
                f"seed {seed}: two runs with the same seed and actions differ (first at event {diverge})"
            )
    if random.getstate() != global_state:
        problems.append("the env used the global `random` module; keep a random.Random of its own")
    if problems:
        raise ConformanceError(
            f"{type(env).__name__} fails the LudicEnv contract:\n- " + "\n- ".join(dict.fromkeys(problems))
        )


def _check_response(
    label: str, request: TokenCompletionRequest, response: Any, problems: list[str]
) -> ChatResponse | None:
    if not isinstance(response, ChatResponse):
        problems.append(f"{label}: complete_tokens must return a ChatResponse, got {type(response).__name__}")
        return None
    if response.prompt_token_ids != request.prompt_token_ids:
        problems.append(f"{label}: prompt_token_ids differ from the request's")
    n = len(response.completion_token_ids)
    if n > request.sampling.max_tokens:
        problems.append(f"{label}: {n} completion tokens exceed max_tokens={request.sampling.max_tokens}")
    if response.finish_reason not in FINISH_REASONS:
        problems.append(
            f"{label}: finish_reason {response.finish_reason!r} is not one of {sorted(FINISH_REASONS)}"
        )
    if n == request.sampling.max_tokens and response.finish_reason not in ("length", "stop"):
        problems.append(f"{label}: a completion of exactly max_tokens must finish with 'length' or 'stop'")
    if response.sampling_temperature != request.sampling.temperature:
        problems.append(
            f"{label}: sampling_temperature {response.sampling_temperature!r}, but the request sampled at "
            f"{request.sampling.temperature!r}; a client reports the temperature it sampled at (the "
            "logprobs are those of softmax(logits / T), and a trainer scores that distribution)"
        )
    if request.return_.return_chosen_logprobs:
        if response.completion_logprobs is None:
            problems.append(f"{label}: logprobs were requested but not returned")
        elif any(lp > 1e-6 for lp in response.completion_logprobs):
            problems.append(f"{label}: logprobs must be <= 0")
    if request.return_.return_prompt_logprobs:
        _check_prompt_logprobs(label, request, response, problems)
    return response


def _check_prompt_logprobs(
    label: str, request: TokenCompletionRequest, response: ChatResponse, problems: list[str]
) -> None:
    values = response.prompt_logprobs
    expected = len(request.prompt_token_ids) - 1
    if values is None:
        problems.append(f"{label}: prompt logprobs were requested (return_prompt_logprobs) but not returned")
    elif len(values) != expected:
        problems.append(
            f"{label}: {len(values)} prompt logprobs for a {len(request.prompt_token_ids)}-token prompt; "
            f"expected {expected} (one per prompt token after the first)"
        )
    elif not all(math.isfinite(lp) for lp in values):
        problems.append(f"{label}: prompt logprobs must be finite, got {list(values)[:20]}")
    elif any(lp > 1e-6 for lp in values):
        problems.append(f"{label}: prompt logprobs must be <= 0, got {list(values)[:20]}")


async def check_client(
    client: ChatClient,
    *,
    prompt_token_ids: Sequence[int],
    max_tokens: int = 8,
    seed: int = 1234,
    deterministic_with_seed: bool = True,
    prompt_logprobs: bool = False,
) -> None:
    """Check the :class:`ChatClient` contract with a few real requests.

    ``prompt_logprobs=True`` also checks ``ReturnSpec.return_prompt_logprobs`` (for clients that
    implement it): one finite logprob ``<= 0`` per prompt token after the first, at the sampling
    temperature of the other requests and at temperature 0 alike.
    """
    problems: list[str] = []
    plain = TokenCompletionRequest(
        prompt_token_ids=tuple(prompt_token_ids),
        sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens),
        seed=seed,
    )
    with_logprobs = TokenCompletionRequest(
        prompt_token_ids=tuple(prompt_token_ids),
        sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens),
        return_=ReturnSpec.for_rl(),
        seed=seed,
    )
    one_token = TokenCompletionRequest(
        prompt_token_ids=tuple(prompt_token_ids),
        sampling=SamplingParams(temperature=1.0, max_tokens=1),
        seed=seed,
    )
    cases = [("plain", plain), ("logprobs", with_logprobs), ("max_tokens=1", one_token)]
    if prompt_logprobs:
        for temperature in (1.0, 0.0):
            cases.append(
                (
                    f"prompt_logprobs at temperature {temperature}",
                    TokenCompletionRequest(
                        prompt_token_ids=tuple(prompt_token_ids),
                        sampling=SamplingParams(temperature=temperature, max_tokens=1),
                        return_=ReturnSpec(return_prompt_logprobs=True),
                        seed=seed,
                    ),
                )
            )
    responses = {}
    for label, request in cases:
        try:
            responses[label] = _check_response(
                label, request, await client.complete_tokens(request), problems
            )
        except Exception as exc:
            problems.append(f"{label}: complete_tokens raised {type(exc).__name__}: {exc}")
    if prompt_logprobs:
        tempered, greedy = (responses.get(f"prompt_logprobs at temperature {t}") for t in (1.0, 0.0))
        if (
            tempered is not None
            and greedy is not None
            and tempered.prompt_logprobs is not None
            and greedy.prompt_logprobs is not None
            and len(tempered.prompt_logprobs) == len(greedy.prompt_logprobs)
            and any(
                abs(a - b) > 1e-4
                for a, b in zip(tempered.prompt_logprobs, greedy.prompt_logprobs, strict=True)
            )
        ):
            problems.append(
                "prompt logprobs depend on the sampling temperature; they must be those of the plain "
                "distribution log softmax(logits)"
            )
    if deterministic_with_seed and responses.get("plain") is not None:
        again = await client.complete_tokens(plain)
        first = responses["plain"]
        assert first is not None
        if again.completion_token_ids != first.completion_token_ids:
            problems.append("the same request with the same seed gave different completions")
    if problems:
        raise ConformanceError(
            f"{type(client).__name__} fails the ChatClient contract:\n- " + "\n- ".join(problems)
        )
