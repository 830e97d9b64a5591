"""Token-exact prompts within a turn.

Within one turn (an ``act`` with its tool loop, plus external tool rounds) every model call's prompt
must start with the previous prompt + sampled completion, token for token, so the turn trains as one
sequence of exactly the sampled tokens. Re-rendering with the chat template does not guarantee that
(templates rewrite tool calls, drop think blocks, add end-of-turn markers never sampled; re-encoding
text need not reproduce the sampled split). :class:`TurnPrompt` therefore keeps the turn's token ids
and appends only the rendering of what is new: the rest of the end-of-turn marker the completion did
not sample, then the new messages and the generation prompt (the text a full render adds, or the new
messages rendered after the last assistant message when the template re-renders earlier ones). Each
extension is compared with a fresh full render; a difference is reported in
``info["retokenization_divergence"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ludic_agents.chat_template import ChatTemplate
from ludic_core.errors import ConfigError, DataError
from ludic_core.types import Message, freeze_message, freeze_messages

__all__ = ["TurnPrompt", "assistant_closing", "divergence_report"]

_SENTINEL = "\u2063LUDIC-ASSISTANT-PROBE\u2063"
_CONTEXT_TOKENS = 16


def assistant_closing(template: ChatTemplate, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """What the template writes after an assistant message's content (e.g. ``"<|im_end|>\\n"``)."""
    probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": _SENTINEL}]
    text = template.render_text(probe, tools=tools, add_generation_prompt=False)
    idx = text.rfind(_SENTINEL)
    if idx == -1:
        raise DataError(
            "the chat template dropped the content of an assistant message; cannot find its closing"
        )
    return text[idx + len(_SENTINEL) :]


def divergence_report(
    template: ChatTemplate, extended: Sequence[int], rerendered: Sequence[int]
) -> dict[str, Any] | None:
    """Where two token sequences first differ (``None`` when equal), with a little decoded context."""
    if list(extended) == list(rerendered):
        return None
    pos = next(
        (i for i, (a, b) in enumerate(zip(extended, rerendered, strict=False)) if a != b),
        min(len(extended), len(rerendered)),
    )
    return {
        "position": pos,
        "extended_len": len(extended),
        "rerender_len": len(rerendered),
        "extended_text": template.decode(extended[pos : pos + _CONTEXT_TOKENS]),
        "rerender_text": template.decode(rerendered[pos : pos + _CONTEXT_TOKENS]),
    }


@attrs.define
class TurnPrompt:
    """The token state of one turn: the messages so far (frozen: shared, never copied per call) and the
    exact ids the model has seen/sampled."""

    template: ChatTemplate
    tools: tuple[Mapping[str, Any], ...] | None
    messages: tuple[Message, ...]
    token_ids: tuple[int, ...]
    prompt_len: int
    awaiting_completion: bool = True

    @classmethod
    def start(
        cls,
        template: ChatTemplate,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> TurnPrompt:
        """Render the turn's first prompt fresh."""
        tools_t = tuple(tools) if tools else None
        frozen, ids = cls.render(template, messages, tools=tools_t)
        return cls(
            template=template,
            tools=tools_t,
            messages=frozen,
            token_ids=ids,
            prompt_len=len(ids),
        )

    @staticmethod
    def render(
        template: ChatTemplate,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> tuple[tuple[Message, ...], tuple[int, ...]]:
        """A fresh prompt: ``messages`` frozen (shared with the steps that record them) and the ids of
        their rendering with the generation prompt. A turn of one model call needs nothing more."""
        frozen = freeze_messages(messages)
        ids = tuple(template.encode(template.render_text(frozen, tools=tools, add_generation_prompt=True)))
        if not ids:
            raise DataError("the chat template rendered an empty prompt")
        return frozen, ids

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.token_ids[: self.prompt_len]  # the tuple itself while no completion follows

    def add_completion(self, completion_ids: Sequence[int], assistant_message: Message) -> None:
        """Record the sampled completion and the assistant message it stands for."""
        if not self.awaiting_completion:
            raise ConfigError("add_completion called twice without a new prompt in between")
        self.token_ids += tuple(completion_ids)
        self.messages += (freeze_message(assistant_message),)
        self.awaiting_completion = False

    def extend(self, new_messages: Sequence[Message]) -> tuple[tuple[int, ...], dict[str, Any]]:
        """Append ``new_messages`` and the generation prompt; return the new prompt ids and a report.

        The report holds ``suffix_method`` (``"rerender_suffix"`` or ``"isolated_suffix"``),
        ``closing_tokens_sampled`` and, when a fresh render of the whole conversation differs from the
        extended ids, ``retokenization_divergence``.
        """
        if self.awaiting_completion:
            raise ConfigError("extend called before the previous prompt's completion was added")
        if not new_messages:
            raise ConfigError("extend needs at least one new message (a tool result, feedback, ...)")
        if not self.messages or self.messages[-1].get("role") != "assistant":
            raise ConfigError("extend expects the conversation to end with the sampled assistant message")
        new = freeze_messages(new_messages)
        closing = assistant_closing(self.template, self.tools)
        completion = self.token_ids[self.prompt_len :]
        remaining_closing, covered = self._remaining_closing(closing, completion)

        full_text = self.template.render_text(
            self.messages + new, tools=self.tools, add_generation_prompt=True
        )
        upto_text = self.template.render_text(self.messages, tools=self.tools, add_generation_prompt=False)
        if full_text.startswith(upto_text) and upto_text.endswith(closing):
            new_text, method = full_text[len(upto_text) :], "rerender_suffix"
        else:
            # Render the new messages after a stand-in assistant message: its tool calls (templates may
            # look them up to label tool results) but sentinel content, which no template rewrites.
            stand_in = {**self.messages[-1], "content": _SENTINEL}
            probe = [{"role": "user", "content": "ping"}, stand_in]
            before = self.template.render_text(probe, tools=self.tools, add_generation_prompt=False)
            after = self.template.render_text([*probe, *new], tools=self.tools, add_generation_prompt=True)
            if not (after.startswith(before) and before.endswith(closing)):
                raise DataError(
                    "cannot render the new messages as an append-only suffix: the chat template renders the "
                    "assistant message differently once messages follow it"
                )
            new_text, method = after[len(before) :], "isolated_suffix"

        suffix = self.template.encode(remaining_closing + new_text)
        self.token_ids += tuple(suffix)
        self.prompt_len = len(self.token_ids)
        self.messages += new
        self.awaiting_completion = True

        report: dict[str, Any] = {"suffix_method": method, "closing_tokens_sampled": covered}
        divergence = divergence_report(self.template, self.token_ids, self.template.encode(full_text))
        if divergence is not None:
            report["retokenization_divergence"] = divergence
        return self.token_ids, report

    def _remaining_closing(self, closing: str, completion: Sequence[int]) -> tuple[str, int]:
        """The part of ``closing`` the completion did not sample, and how many closing tokens it did."""
        closing_ids = list(self.template.encode(closing)) if closing else []
        for k in range(min(len(closing_ids), len(completion)), 0, -1):
            if list(completion[-k:]) == closing_ids[:k]:
                covered_text = self.template.decode(closing_ids[:k])
                if closing.startswith(covered_text):
                    return closing[len(covered_text) :], k
        return closing, 0
