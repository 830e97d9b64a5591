"""Chat templates: messages (and tool schemas) in, prompt text and token ids out.

The agent renders prompts locally and sends token ids; the ids it sends are canonical. A
:class:`ChatTemplate` therefore exposes both the text rendering and the tokenizer's ``encode`` /
``decode``, which the agent needs to extend a turn's prompt token for token
(see :mod:`ludic_agents.extension`).

:class:`HFChatTemplate` wraps any tokenizer with ``apply_chat_template`` (Hugging Face
``transformers``, imported only through the tokenizer you pass in).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_agents.tool_parsers import ToolCallParser, get_tool_parser
from ludic_core.errors import ConfigError
from ludic_core.types import Message

__all__ = ["ChatTemplate", "HFChatTemplate", "RenderedPrompt", "normalize_messages", "renders_tool_calls"]


def _int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@attrs.frozen
class RenderedPrompt:
    text: str
    token_ids: tuple[int, ...] = attrs.field(converter=_int_tuple)


@runtime_checkable
class ChatTemplate(Protocol):
    """What an agent needs from a model's chat format."""

    @property
    def tool_parser(self) -> ToolCallParser | None: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Tokens that end a completion (stripped from the message text the agent stores)."""
        ...

    def render_text(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str: ...

    def encode(self, text: str) -> tuple[int, ...]:
        """Token ids of ``text`` with special-token strings recognised and nothing added around it."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``, special tokens kept (so ``<think>``/``<tool_call>`` survive)."""
        ...


def normalize_messages(messages: Sequence[Message]) -> list[Message]:
    """Copy messages into the shape Hugging Face templates expect.

    Contexts store OpenAI-format tool calls (``arguments`` is a JSON string); templates such as
    Qwen's apply ``tojson`` to the arguments and expect a mapping, so JSON-object strings are
    decoded here. ``content=None`` becomes ``""`` (templates concatenate it).
    """
    out: list[Message] = []
    for message in messages:
        m = copy.deepcopy(dict(message))
        if m.get("content") is None:
            m["content"] = ""
        calls = m.get("tool_calls")
        if calls:
            fixed = []
            for call in calls:
                c = copy.deepcopy(dict(call))
                fn = c.get("function")
                if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
                    try:
                        parsed = json.loads(fn["arguments"])
                    except json.JSONDecodeError:
                        parsed = None
                    if isinstance(parsed, dict):
                        c["function"] = {**fn, "arguments": parsed}
                fixed.append(c)
            m["tool_calls"] = fixed
        out.append(m)
    return out


class HFChatTemplate:
    """A chat template over a tokenizer with ``apply_chat_template`` (e.g. ``transformers``).

    * ``tool_parser``: a name (``"hermes"``, ``"qwen2.5"``, ``"qwen3"``, ``"qwen3_coder"``) or a
      :class:`~ludic_agents.tool_parsers.ToolCallParser`; ``None`` means the agent cannot use tools.
    * ``template_kwargs``: passed to every ``apply_chat_template`` call (e.g.
      ``{"enable_thinking": False}`` for Qwen3-style templates).
    * ``chat_template``: a Jinja template that overrides the tokenizer's own.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        tool_parser: str | ToolCallParser | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> None:
        if not callable(getattr(tokenizer, "apply_chat_template", None)):
            raise ConfigError(
                f"HFChatTemplate needs a tokenizer with apply_chat_template, got {type(tokenizer).__name__}"
            )
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                f"tokenizer {type(tokenizer).__name__} has no chat_template; pass chat_template="
            )
        reserved = {"tools", "add_generation_prompt", "tokenize", "chat_template", "conversation"}
        clash = sorted(reserved & set(template_kwargs or {}))
        if clash:
            raise ConfigError(f"template_kwargs may not set {clash}; they are controlled by the agent")
        self.tokenizer = tokenizer
        self._tool_parser = None if tool_parser is None else get_tool_parser(tool_parser)
        self.template_kwargs = dict(template_kwargs or {})
        self.chat_template = chat_template

    @property
    def tool_parser(self) -> ToolCallParser | None:
        return self._tool_parser

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)

    def render_text(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        kwargs = dict(self.template_kwargs)
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        text = self.tokenizer.apply_chat_template(
            normalize_messages(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **kwargs,
        )
        if not isinstance(text, str):
            raise ConfigError(
                f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str"
            )
        return text

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> RenderedPrompt:
        text = self.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        return RenderedPrompt(text=text, token_ids=self.encode(text))

    def encode(self, text: str) -> tuple[int, ...]:
        # Same as apply_chat_template(tokenize=True): the rendered text already holds every special
        # token, so nothing (BOS) may be added around it.
        return tuple(int(i) for i in self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=False))


_PROBE_TOOL = "ludic_probe_tool_name"


def renders_tool_calls(template: ChatTemplate) -> bool:
    """Whether the template writes an assistant message's structured ``tool_calls`` into the prompt.

    Templates without tool support (plain ChatML, e.g. SmolLM2) ignore the field; an agent must
    then keep the tool-call text in the message content, or the history would lose the calls.
    """
    cached = getattr(template, "_ludic_renders_tool_calls", None)
    if isinstance(cached, bool):
        return cached
    call = {"id": "call_0", "type": "function", "function": {"name": _PROBE_TOOL, "arguments": "{}"}}
    probe: list[Message] = [
        {"role": "user", "content": "ping"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    try:
        text = template.render_text(probe, add_generation_prompt=False)
    except Exception:  # a template that cannot render tool calls at all
        result = False
    else:
        result = _PROBE_TOOL in text
    with contextlib.suppress(AttributeError):  # slotted templates simply re-probe next time
        template._ludic_renders_tool_calls = result  # type: ignore[attr-defined]
    return result
