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
from ludic_core.retokenize import MessageTemplate, TokenizerTemplate
from ludic_core.types import Message

__all__ = [
    "CHATML_TOOLS",
    "NAMED_CHAT_TEMPLATES",
    "ChatTemplate",
    "HFChatTemplate",
    "RenderedPrompt",
    "named_chat_template",
    "normalize_messages",
    "renders_tool_calls",
]

CHATML_TOOLS = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% if m['role'] == 'system' and tools %}{{ '\\n\\nTools:' }}"
    "{% for t in tools %}{{ '\\n' }}{{ t['function'] | tojson }}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML with the tool schemas listed in the system message (one JSON object a line after
``Tools:``) and tool results as ``tool`` messages: the prompt shape a small ChatML model without tool
training (SmolLM2) can learn to call tools in, where its own template has no tool section."""

NAMED_CHAT_TEMPLATES = {"chatml_tools": CHATML_TOOLS}
"""Templates an agent built from a config may name (``agent_kwargs.chat_template``)."""


def named_chat_template(name: str) -> str:
    """The Jinja source of the template ``name``; an unknown name is a ConfigError listing them."""
    if name not in NAMED_CHAT_TEMPLATES:
        raise ConfigError(
            f"chat_template = {name!r}: not a named chat template; named: {', '.join(NAMED_CHAT_TEMPLATES)} "
            "(or leave it unset for the tokenizer's own)"
        )
    return NAMED_CHAT_TEMPLATES[name]


def _int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@attrs.frozen
class RenderedPrompt:
    text: str
    token_ids: tuple[int, ...] = attrs.field(converter=_int_tuple)


@runtime_checkable
class ChatTemplate(MessageTemplate, Protocol):
    """What an agent needs from a model's chat format: a :class:`~ludic_core.retokenize.MessageTemplate`
    (``render_text``, ``encode``) that also parses tool calls, knows its end tokens and decodes."""

    @property
    def tool_parser(self) -> ToolCallParser | None: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Tokens that end a completion (stripped from the message text the agent stores)."""
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


class HFChatTemplate(TokenizerTemplate):
    """A chat template over a tokenizer with ``apply_chat_template`` (e.g. ``transformers``).

    * ``tool_parser``: a name (``"hermes"``, ``"qwen2.5"``, ``"qwen3"``, ``"qwen3_coder"``) or a
      :class:`~ludic_agents.tool_parsers.ToolCallParser`; ``None`` means the agent cannot use tools.
    * ``template_kwargs`` and ``chat_template``: as in :class:`~ludic_core.retokenize.TokenizerTemplate`.

    Messages reach the template through :func:`normalize_messages`.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        tool_parser: str | ToolCallParser | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> None:
        super().__init__(tokenizer, template_kwargs=template_kwargs, chat_template=chat_template)
        self._tool_parser = None if tool_parser is None else get_tool_parser(tool_parser)

    @property
    def tool_parser(self) -> ToolCallParser | None:
        return self._tool_parser

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)

    def template_messages(self, messages: Sequence[Message]) -> list[Message]:
        return normalize_messages(messages)

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> RenderedPrompt:
        text = self.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        return RenderedPrompt(text=text, token_ids=self.encode(text))

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
