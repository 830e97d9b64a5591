"""The scripted teacher of the calculator tool-use task (:class:`SumOfProductsEnv` with two products,
a ``calculator`` tool in the Hermes call format, ChatML prompts): it knows the call format, not the
task. Per episode it answers at once with a mental estimate, or asks the calculator for the first
product only, or for the whole sum, each with probability ⅓, and then copies the calculator's result.
A warm start on its episodes therefore uses the tool in about two episodes of three and is right in
about one of three; what the task needs (always the whole expression, and copying the result exactly)
is left to RL.

Registered as the scripted teacher ``"calculator"`` (entry-point group ``ludic.scripted_teachers``:
``ludic train calculator-tool-use`` warms up on its episodes).
"""

from __future__ import annotations

import random
import re
from typing import Any

from ludic_core.inference import TokenCompletionRequest
from ludic_core.testing import ScriptedChatClient

__all__ = ["calculator_teacher", "teacher_reply"]

_QUESTION = re.compile(r"Compute (\d+) × (\d+) \+ (\d+) × (\d+)\.")
_TOOL_RESULT = re.compile(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>\n<\|im_start\|>assistant\n$", re.DOTALL)


def _estimate(a: int, b: int) -> int:
    """A mental estimate: each factor rounded to its leading digit."""

    def lead(n: int) -> int:
        scale = 10 ** (len(str(n)) - 1)
        return round(n / scale) * scale

    return lead(a) * lead(b)


def teacher_reply(prompt: str, rng: random.Random) -> str:
    """The teacher's reply to a rendered ChatML prompt: the tool's result copied when the prompt ends
    with one, else one of its three habits on the last question in the prompt."""
    result = _TOOL_RESULT.search(prompt)
    if result is not None:
        return f"{result.group(1).strip()}<|im_end|>"
    question = _QUESTION.findall(prompt)
    if not question:
        raise ValueError(f"no two-product question in the prompt: {prompt[-200:]!r}")
    a1, b1, a2, b2 = (int(v) for v in question[-1])
    mode = rng.choice(("direct", "partial", "full"))
    if mode == "direct":
        return f"{_estimate(a1, b1) + _estimate(a2, b2)}<|im_end|>"
    expression = f"{a1} * {b1}" if mode == "partial" else f"{a1} * {b1} + {a2} * {b2}"
    call = '{"name": "calculator", "arguments": {"expression": "' + expression + '"}}'
    return f"<tool_call>{call}</tool_call><|im_end|>"


def calculator_teacher(tokenizer: Any) -> ScriptedChatClient:
    """A scripted client that reads the question from the rendered prompt and replies with
    ``tokenizer``'s ids, end-of-turn token included, its habit drawn from the request's seed."""

    def reply(request: TokenCompletionRequest, _call_index: int) -> str:
        prompt = tokenizer.decode(list(request.prompt_token_ids))
        return teacher_reply(prompt, random.Random(request.seed))

    return ScriptedChatClient(
        reply,
        encode=lambda text: tokenizer.encode(text, add_special_tokens=False),
        decode=lambda ids: tokenizer.decode(list(ids)),
    )
