"""Token ids for message-level model calls, rendered with the student's chat template.

Rollouts sampled through a :class:`~ludic_core.message_client.MessageClient` record messages and reply
text but no token ids, so they teach a student only by SFT, once written in the student's format. Per
call, the prompt is ``template.render_text(prompt_messages, add_generation_prompt=True)``, encoded; the
conversation with the reply appended, rendered without a generation prompt, must start with the
prompt's text (else :class:`~ludic_core.errors.DataError`, rather than train on a sequence the model
would never see), and its rest (reply and end-of-turn marker), encoded alone, is the completion (action
mask 1). There are no behaviour logprobs: such items suit cross-entropy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ludic_core.errors import ConfigError, DataError
from ludic_core.types import AgentStep, Message

__all__ = ["MessageTemplate", "TokenizerTemplate", "retokenize_call"]


@runtime_checkable
class MessageTemplate(Protocol):
    """The part of a chat template re-tokenisation needs (``ludic_agents.HFChatTemplate`` has it)."""

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


class TokenizerTemplate:
    """A tokenizer's chat template as a :class:`MessageTemplate`: any tokenizer with
    ``apply_chat_template`` and ``encode`` (a ``transformers`` one), no import of its library here.
    Agents that use tools want ``ludic_agents.HFChatTemplate``, which adds tool-call handling.

    * ``template_kwargs``: passed to every ``apply_chat_template`` call (e.g.
      ``{"enable_thinking": False}`` for Qwen3-style templates).
    * ``chat_template``: a Jinja template that overrides the tokenizer's own.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        template_kwargs: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
    ) -> None:
        who = type(self).__name__
        if not callable(getattr(tokenizer, "apply_chat_template", None)):
            raise ConfigError(
                f"{who} needs a tokenizer with apply_chat_template, got {type(tokenizer).__name__}"
            )
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                f"tokenizer {type(tokenizer).__name__} has no chat_template; pass chat_template="
            )
        reserved = {"tools", "add_generation_prompt", "tokenize", "chat_template", "conversation"}
        clash = sorted(reserved & set(template_kwargs or {}))
        if clash:
            raise ConfigError(f"template_kwargs may not set {clash}; they are controlled by {who}")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.chat_template = chat_template

    def template_messages(self, messages: Sequence[Message]) -> list[Message]:
        """The messages as the template reads them."""
        return [dict(m) for m in messages]

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
            self.template_messages(messages),
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

    def encode(self, text: str) -> tuple[int, ...]:
        # The rendered text holds every special token already: nothing may be added around it.
        return tuple(int(i) for i in self.tokenizer.encode(text, add_special_tokens=False))


def check_template(template: object) -> MessageTemplate:
    if not isinstance(template, MessageTemplate):
        raise ConfigError(
            "retokenize_with must be a chat template with render_text(messages, add_generation_prompt=) "
            f"and encode(text), e.g. ludic_agents.HFChatTemplate(tokenizer); got {type(template).__name__}"
        )
    return template


def retokenize_call(step: AgentStep, template: MessageTemplate, *, where: str) -> tuple[list[int], list[int]]:
    """``(prompt ids, completion ids)`` of one message-level call in ``template``'s format."""
    if step.tool_calls:
        raise DataError(f"{where}: step {step.index} made tool calls; re-tokenising those is not supported")
    messages = list(step.prompt_messages)
    if not messages:
        raise DataError(f"{where}: step {step.index} recorded no prompt messages to re-tokenise")
    prompt = template.render_text(messages, add_generation_prompt=True)
    full = template.render_text(
        [*messages, {"role": "assistant", "content": step.action}], add_generation_prompt=False
    )
    if not full.startswith(prompt):
        differs_at = next(
            (i for i, (a, b) in enumerate(zip(prompt, full, strict=False)) if a != b),
            min(len(prompt), len(full)),
        )
        raise DataError(
            f"{where}: the chat template renders the conversation with the reply differently from the "
            f"prompt it renders for generation (first difference at character {differs_at}: "
            f"{prompt[differs_at : differs_at + 30]!r} vs {full[differs_at : differs_at + 30]!r}); the "
            "student would never see this sequence"
        )
    completion = template.encode(full[len(prompt) :])
    if not completion:
        raise DataError(f"{where}: step {step.index}'s reply renders to no tokens")
    return list(template.encode(prompt)), list(completion)
