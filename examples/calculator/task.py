"""The tool-use task: a sum of two products that a small model cannot compute in its head, a
calculator it can call, and the scripted warm start that teaches the call format.

* **the env**: :class:`~ludic_envs.delegation.SumOfProductsEnv` with two products of factors in
  ``[12, 999]`` ("Compute 347 × 28 + 905 × 613."), graded on the last number of the reply: 1 for the
  exact sum, 0 otherwise;
* **the agent**: :class:`~ludic_agents.ToolAgent` with the ``calculator`` tool and the Hermes tool-call
  format (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``); up to
  :data:`MAX_CALLS` model calls per episode, the last one always read as the answer. A reply that is not
  a bare number, or a tool call that cannot be read, scores -1;
* **the chat template**: ChatML as SmolLM2 writes it, with the tool schemas listed in the system
  message and tool results in ``tool`` messages (SmolLM2's own template has no tool section);
* **the teacher** (:func:`format_teacher`) knows the call format, not the task: per episode it answers
  at once with a mental estimate, or asks the calculator for the first product only, or for the whole
  sum, each with probability ⅓, and then copies the calculator's result. A warm start on its episodes
  therefore uses the tool in about two episodes of three and is right in about one of three; what the
  task needs (always the whole expression, and copying the result exactly) is left to RL.

The pieces live in the packages, where ``ludic train calculator-tool-use`` finds them by name: the tool
in :mod:`ludic_agents.calculator`, the chat template in :mod:`ludic_agents.chat_template`, the prompt,
env options and parser in ludic-envs (:func:`~ludic_envs.run_defaults.sum_of_products_run_defaults`,
:func:`~ludic_envs.eval_profiles.number_parser`) and the teacher in
:mod:`ludic_envs.delegation.calculator_teacher`. This module wires them into the example's engine and
adds its per-episode report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ludic_agents.calculator import calculator_tool
from ludic_agents.chat_template import CHATML_TOOLS, ChatTemplate, HFChatTemplate
from ludic_agents.context import FullDialog
from ludic_agents.tool_agent import ToolAgent
from ludic_core.engine import RolloutEngine
from ludic_core.inference import ChatClient, InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.rollout_settings import RolloutSettings
from ludic_core.types import Rollout
from ludic_envs.delegation import SumOfProductsEnv
from ludic_envs.delegation.calculator_teacher import calculator_teacher
from ludic_envs.eval_profiles import number_parser
from ludic_envs.run_defaults import CALCULATOR_SYSTEM_PROMPT, sum_of_products_run_defaults

__all__ = [
    "CHAT_TEMPLATE",
    "MAX_CALLS",
    "SYSTEM_PROMPT",
    "answer_parser",
    "episode_report",
    "format_teacher",
    "inference_spec",
    "make_engine",
    "rates",
    "rollout_settings",
    "task_requests",
    "tool_chat_template",
]

# The task `ludic train calculator-tool-use` trains, declared once with the env (the reasons are there).
_RUN_DEFAULTS = sum_of_products_run_defaults()
SYSTEM_PROMPT = CALCULATOR_SYSTEM_PROMPT
CHAT_TEMPLATE = CHATML_TOOLS
MAX_CALLS: int = _RUN_DEFAULTS["agent_kwargs"]["max_calls_per_turn"]
MAX_CALL_TOKENS: int = _RUN_DEFAULTS["sampling"]["max_tokens"]
ENV_KWARGS: dict[str, int] = _RUN_DEFAULTS["env_kwargs"]

answer_parser = number_parser
"""The answer must be a bare number (commas allowed); anything else scores -1 and ends the episode."""

format_teacher = calculator_teacher
"""The warm start's teacher (see the module docstring)."""


def tool_chat_template(tokenizer: Any) -> HFChatTemplate:
    return HFChatTemplate(tokenizer, tool_parser="hermes", chat_template=CHAT_TEMPLATE)


def inference_spec(*, temperature: float, logprobs: bool) -> InferenceSpec:
    return InferenceSpec(
        sampling=SamplingParams(temperature=temperature, max_tokens=MAX_CALL_TOKENS),
        return_=ReturnSpec(return_chosen_logprobs=logprobs),
    )


def rollout_settings() -> RolloutSettings:
    # One env step per episode; every episode of a batch in flight, so the local client batches them.
    return RolloutSettings(max_steps=1, concurrency=256)


def make_engine(
    client: ChatClient, *, chat_template: ChatTemplate, seed: int, rollout_log: str | None = None
) -> RolloutEngine:
    """Requests name the env ``"sum_of_products"`` and the protocol ``"calculator_agent"``."""

    def env() -> SumOfProductsEnv:
        return SumOfProductsEnv(**ENV_KWARGS)

    def protocol() -> SingleAgentProtocol:
        agent = ToolAgent(
            client=client,
            parser=answer_parser,
            chat_template=chat_template,
            tools=[calculator_tool()],
            max_calls_per_turn=MAX_CALLS,
            # A call cut by max_tokens is unreadable anyway; the tool parser or the answer parser says so.
            reject_incomplete_completions=False,
            context=FullDialog(system_prompt=SYSTEM_PROMPT),
        )
        return SingleAgentProtocol(agent, stop_on_parse_error=True)

    return RolloutEngine(
        env_factories={"sum_of_products": env},
        protocol_factories={"calculator_agent": protocol},
        base_seed=seed,
        rollout_log=rollout_log,
    )


def task_requests(count: int, *, seed: int, temperature: float, logprobs: bool) -> list[RolloutRequest]:
    """``count`` questions with fixed env and sampling seeds: the same questions and draws for every
    checkpoint, so two checkpoints are compared question by question."""
    from ludic_core.seeding import derive_seed

    spec = inference_spec(temperature=temperature, logprobs=logprobs)
    return [
        RolloutRequest(
            env=EnvSpec("sum_of_products"),
            protocol=ProtocolSpec("calculator_agent"),
            env_seed=derive_seed(seed, "question", i),
            sampling_seed=derive_seed(seed, "draw", i),
            inference=spec,
            meta={"question": i},
        )
        for i in range(count)
    ]


def episode_report(rollout: Rollout) -> dict[str, Any]:
    """What one episode did with the tool:

    * ``correct``: the answer equals the sum;
    * ``called``: the model called a tool at least once;
    * ``valid_calls``: every call it wrote was read and ran without error (None when it made none);
    * ``right_expression``: some calculator result equals the sum (it asked for the whole expression);
    * ``malformed``: the answer or a tool call could not be read.
    """
    agent_steps = [s for s in rollout.steps if s.kind == "agent"]
    env_steps = [s for s in rollout.steps if s.kind == "env"]
    target = env_steps[-1].info.get("target") if env_steps else None
    calls = [c for s in agent_steps for c in (s.tool_calls or ())]
    results = [r for s in agent_steps for r in (s.tool_results or ())]
    unreadable = any(s.info.get("tool_parse_error") for s in agent_steps)
    failed = unreadable or any(r.content.startswith("Error:") for r in results)
    return {
        "correct": bool(env_steps and env_steps[-1].info.get("correct")),
        "called": bool(calls) or unreadable,
        "valid_calls": None if not calls and not unreadable else not failed,
        "right_expression": target is not None and any(r.content == str(target) for r in results),
        "malformed": any(s.parse_error for s in agent_steps),
        "tool_calls": len(calls),
    }


def rates(reports: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per-run shares: success (overall and among episodes that never called the tool), episodes
    with a tool call, valid calls among those, the whole expression asked for, malformed replies; and
    tool calls per episode."""

    def share(key: str, among: Callable[[dict[str, Any]], bool] = lambda r: True) -> float:
        pool = [r for r in reports if among(r)]
        return sum(bool(r[key]) for r in pool) / len(pool) if pool else 0.0

    return {
        "success": share("correct"),
        "success_without_tool": share("correct", lambda r: not r["called"]),
        "tool_use": share("called"),
        "valid_call_rate": share("valid_calls", lambda r: r["valid_calls"] is not None),
        "right_expression": share("right_expression"),
        "malformed": share("malformed"),
        "calls_per_episode": sum(r["tool_calls"] for r in reports) / max(1, len(reports)),
    }
