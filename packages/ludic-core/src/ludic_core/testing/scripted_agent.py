"""A minimal, complete agent harness for tests of protocols, engines and envs.

It renders the dialog as plain text (``<|role|>content`` lines), tokenises it with any ``encode``
callable, calls the client, and parses the completion. Text rendering is append-only, so within a turn
every prompt extends the previous prompt + completion token for token (with a bijective tokenizer such
as :class:`~ludic_core.testing.ByteTokenizer`).

External tools: a completion of the form ``CALL <name> <json-args>`` with ``name`` in
``external_tools`` is handed to the protocol as an external tool call.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ludic_core.call_timeout import call_timeout
from ludic_core.errors import LudicTimeoutError, ProtocolError
from ludic_core.harness import DEFAULT_ACT_OPTIONS, ActOptions, AgentActResult, AgentActStep
from ludic_core.inference import ChatClient, InferenceSpec, TokenCompletionRequest
from ludic_core.parsing import Parser, ParseResult
from ludic_core.testing.tokenizers import ByteTokenizer, Encode
from ludic_core.types import ChatResponse, FrozenMessage, Info, Message, ToolCall, ToolResult, freeze_messages

__all__ = ["ByteChatTemplate", "ScriptedAgent", "identity_parser", "render_text_dialog"]

INCOMPLETE_FEEDBACK = "Your response was cut off. Answer within the token limit."

# Immutable defaults shared by every agent (an agent per episode need not build them each time).
_BYTE_ENCODE: Encode = ByteTokenizer().encode
_DEFAULT_INFERENCE = InferenceSpec()


def identity_parser(text: str) -> ParseResult:
    """Accept any non-empty stripped text as the action."""
    action = text.strip()
    return (
        ParseResult(action=action) if action else ParseResult(action=None, reward=-1.0, obs="Empty action.")
    )


def render_text_dialog(messages: Sequence[Message]) -> str:
    """The test agent's chat template: one ``<|role|>content`` line per message, then the reply cue."""
    parts = [f"<|{m['role']}|>{m.get('content') or ''}\n" for m in messages]
    return "".join(parts) + "<|assistant|>"


class ByteChatTemplate:
    """:func:`render_text_dialog` over byte tokens, as a ``ludic_agents`` ChatTemplate: a full agent
    given it renders and tokenises exactly what :class:`ScriptedAgent` does."""

    tool_parser = None

    def __init__(self, tokenizer: ByteTokenizer) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids: tuple[int, ...] = (tokenizer.eos_token_id,)

    def render_text(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        text = render_text_dialog(messages)
        return text if add_generation_prompt else text.removesuffix("<|assistant|>")

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)


class ScriptedAgent:
    """Implements :class:`~ludic_core.harness.AgentHarness` with a text template and a parser."""

    def __init__(
        self,
        client: ChatClient,
        *,
        parser: Parser = identity_parser,
        encode: Encode | None = None,
        system_prompt: str | None = None,
        external_tools: Collection[str] = (),
        inference: InferenceSpec | None = None,
        incomplete_completion_penalty: float = -0.1,
    ) -> None:
        self.client = client
        self.parser = parser
        self.encode: Encode = encode or _BYTE_ENCODE
        self._system_prompt = system_prompt
        self.external_tools = frozenset(external_tools)
        self.inference = inference or _DEFAULT_INFERENCE
        self.incomplete_completion_penalty = incomplete_completion_penalty
        # Frozen, so every step's prompt_messages shares them instead of copying the conversation.
        self.messages: list[Message] = []

    @property
    def default_system_prompt(self) -> str | None:
        return self._system_prompt

    def reset(self, *, system_prompt: str | None = None) -> None:
        self.messages = [FrozenMessage(role="system", content=system_prompt)] if system_prompt else []

    def on_env_reset(self, obs: str, info: Info) -> None:
        self.messages.append(FrozenMessage(role="user", content=obs))

    def on_after_step(self, obs: str, info: Info) -> None:
        self.messages.append(FrozenMessage(role="user", content=obs))

    def on_tool_results(self, results: Sequence[ToolResult]) -> None:
        self.messages.extend(FrozenMessage(r.to_message()) for r in results)

    def _tool_call(self, text: str) -> ToolCall | None:
        parts = text.strip().split(" ", 2)
        if len(parts) >= 2 and parts[0] == "CALL" and parts[1] in self.external_tools:
            args = parts[2] if len(parts) == 3 else "{}"
            try:
                json.loads(args)
            except json.JSONDecodeError:
                return None
            return ToolCall(id=f"call_{len(self.messages)}", name=parts[1], arguments=args)
        return None

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        spec = options.inference or self.inference
        prompt_text = render_text_dialog(self.messages)
        request = TokenCompletionRequest.from_spec(
            self.encode(prompt_text), spec, seed=options.sampling_seed, prompt_text=prompt_text
        )
        try:
            # Not wait_for (an extra task per call) nor asyncio.timeout (a loop timer per call).
            with call_timeout(options.timeout_s):
                response = await self.client.complete_tokens(request)
        except TimeoutError as exc:
            raise LudicTimeoutError(
                f"model call did not answer within timeout_s={options.timeout_s}"
            ) from exc
        if not isinstance(response, ChatResponse):
            raise ProtocolError(
                f"{type(self.client).__name__}.complete_tokens returned {type(response).__name__}, "
                "expected a ChatResponse"
            )
        # Shared, not copied: the agent's history is frozen (a plain dict someone appended is frozen here).
        prompt_messages = freeze_messages(self.messages)
        text = response.text
        self.messages.append(FrozenMessage(role="assistant", content=text))
        finish_reason = response.finish_reason
        info: Info = {"finish_reason": finish_reason}
        if response.policy_version is not None:
            info["policy_version"] = response.policy_version
        # The trace comes from a checked ChatResponse and the messages are frozen: the step takes them
        # as they are (AgentActStep._trusted).
        trace = response.to_trace()
        call = self._tool_call(text) if self.external_tools and finish_reason != "length" else None
        if call is not None:
            step = AgentActStep._trusted(
                trace, prompt_messages, text, "external", None, tool_calls=(call,), info=info
            )
            return AgentActResult._one(step)
        if finish_reason == "length":
            info["incomplete_completion"] = True
            parsed = ParseResult(
                action=None, reward=self.incomplete_completion_penalty, obs=INCOMPLETE_FEEDBACK
            )
        else:
            parsed = self.parser(text)
        return AgentActResult._one(
            AgentActStep._trusted(trace, prompt_messages, text, "env", parsed, info=info)
        )
