"""A plain-text chat template over the fake service's byte vocabulary, for dry runs of agent recipes.

A real base model's template (and tokenizer) would come from the Hugging Face Hub; the fake model's
vocabulary is bytes, so an agent that samples from the fake is handed this ``<|role|>content``
template and :class:`~ludic_tinker.testing.model.FakeTokenizer` instead. Needs no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ludic_core.testing.scripted_agent import render_text_dialog
from ludic_tinker.testing.model import FakeTokenizer


class ByteChatTemplate:
    """``<|role|>content`` lines over the fake service's byte vocabulary (a ludic_agents ChatTemplate)."""

    tool_parser = None

    def __init__(self, tokenizer: FakeTokenizer) -> None:
        self.tokenizer = tokenizer

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return (self.tokenizer.eos_token_id,)

    def render_text(
        self,
        messages: Sequence[Any],
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
