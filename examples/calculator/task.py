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
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from calculator import calculator_tool

from ludic_agents.chat_template import ChatTemplate, HFChatTemplate
from ludic_agents.context import FullDialog
from ludic_agents.tool_agent import ToolAgent
from ludic_core.engine import RolloutEngine
from ludic_core.inference import ChatClient, InferenceSpec, ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.parsing import ParseResult
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.rollout_settings import RolloutSettings
from ludic_core.testing import ScriptedChatClient
from ludic_core.types import Rollout
from ludic_envs.delegation import SumOfProductsEnv

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

SYSTEM_PROMPT = (
    "You answer arithmetic questions exactly. Use the calculator: write "
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34 + 5"}}</tool_call> '
    "and its result comes back. Then reply with the final number only."
)

# ChatML with the tools listed in the system message. Written out rather than taken from a tool-aware
# model's template so that a 135M model without tool training can use the same prompt shape.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% if m['role'] == 'system' and tools %}{{ '\\n\\nTools:' }}"
    "{% for t in tools %}{{ '\\n' }}{{ t['function'] | tojson }}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

MAX_CALLS = 3  # one tool call and the answer, with one spare call
MAX_CALL_TOKENS = 64  # the teacher's longest call is 43 SmolLM2 tokens
ENV_KWARGS = {"num_parts": 2, "min_factor": 12, "max_factor": 999}

_NUMBER = re.compile(r"\s*-?\d[\d,]*(\.\d+)?\s*")
_QUESTION = re.compile(r"Compute (\d+) × (\d+) \+ (\d+) × (\d+)\.")
_TOOL_RESULT = re.compile(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>\n<\|im_start\|>assistant\n$", re.DOTALL)


def answer_parser(text: str) -> ParseResult:
    """The answer must be a bare number (commas allowed); anything else scores -1 and ends the episode."""
    if _NUMBER.fullmatch(text):
        return ParseResult(action=text.strip(), reward=0.0)
    return ParseResult(action=None, reward=-1.0, obs="Reply with the final number only.")


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


def _estimate(a: int, b: int) -> int:
    """A mental estimate: each factor rounded to its leading digit."""

    def lead(n: int) -> int:
        scale = 10 ** (len(str(n)) - 1)
        return round(n / scale) * scale

    return lead(a) * lead(b)


def _teacher_reply(prompt: str, rng: random.Random) -> str:
    result = _TOOL_RESULT.search(prompt)
    if result is not None:
        return f"{result.group(1).strip()}<|im_end|>"
    question = _QUESTION.findall(prompt)
    if not question:
        raise ValueError(f"no question in the prompt: {prompt[-200:]!r}")
    a1, b1, a2, b2 = (int(v) for v in question[-1])
    mode = rng.choice(("direct", "partial", "full"))
    if mode == "direct":
        return f"{_estimate(a1, b1) + _estimate(a2, b2)}<|im_end|>"
    expression = f"{a1} * {b1}" if mode == "partial" else f"{a1} * {b1} + {a2} * {b2}"
    call = '{"name": "calculator", "arguments": {"expression": "' + expression + '"}}'
    return f"<tool_call>{call}</tool_call><|im_end|>"


def format_teacher(tokenizer: Any) -> ScriptedChatClient:
    """The warm start's teacher (see the module docstring): a scripted client that reads the question
    from the rendered prompt and replies with real tokenizer ids, end-of-turn token included."""

    def reply(request: TokenCompletionRequest, _call_index: int) -> str:
        prompt = tokenizer.decode(list(request.prompt_token_ids))
        return _teacher_reply(prompt, random.Random(request.seed))

    return ScriptedChatClient(
        reply,
        encode=lambda text: tokenizer.encode(text, add_special_tokens=False),
        decode=lambda ids: tokenizer.decode(list(ids)),
    )


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
