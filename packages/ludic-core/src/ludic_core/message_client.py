"""The message-level inference contract: chat messages in, reply text out, no token ids.

Hosted APIs and OpenAI-compatible servers (vLLM, SGLang) take chat messages and return text; they do
not hand back the exact token ids they rendered and sampled. Rollouts sampled this way are good for
evaluation and, after re-tokenisation, for SFT data, but never for on-policy losses, which need the
sampled tokens and their logprobs (:class:`~ludic_core.inference.ChatClient` is the token-level
contract for that).

Such rollouts are marked: every model call's step info carries ``token_level: False``
(:data:`TOKEN_LEVEL_KEY`), its trace holds no token ids, and the SAW builder refuses them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_core.inference import SamplingParams
from ludic_core.types import Message

__all__ = ["TOKEN_LEVEL_KEY", "MessageClient", "MessageCompletion", "is_message_level"]

TOKEN_LEVEL_KEY = "token_level"
"""Agent-step info key; ``False`` marks a model call sampled through a :class:`MessageClient`."""


@attrs.frozen
class MessageCompletion:
    """One reply: its text, why it stopped (``stop``, ``length``...), the model that answered, and the
    server's token usage when it reports one (counts only; the ids stay on the server)."""

    text: str
    finish_reason: str | None = None
    model: str | None = None
    usage: Mapping[str, int] = attrs.field(factory=dict)


@runtime_checkable
class MessageClient(Protocol):
    """An async chat client that works on messages. Failures raise
    :class:`~ludic_core.errors.LudicError` subclasses; every call is bounded by the client's deadline."""

    async def complete_messages(
        self, messages: Sequence[Message], sampling: SamplingParams, *, seed: int | None = None
    ) -> MessageCompletion: ...


def is_message_level(info: Mapping[str, Any]) -> bool:
    """Whether a model call's step info marks it as sampled without token ids."""
    return info.get(TOKEN_LEVEL_KEY) is False
