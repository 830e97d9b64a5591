"""A scripted chat client that speaks a real tokenizer's token ids.

``ludic_core.testing.ScriptedChatClient`` scripts text; agents' token-exactness tests also need to
script *token ids* the way a model samples them: an end-of-turn token or not, a completion cut by
``max_tokens``, and non-canonical splits (a model may sample ``"hel" + "lo"`` where the tokenizer
would encode ``"hello"``), which re-encoding text can never reproduce.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.seeding import derive_seed
from ludic_core.testing.scripted_clients import scripted_prompt_logprob
from ludic_core.types import ChatResponse

__all__ = ["ScriptedCompletion", "ScriptedTokenClient"]


@attrs.frozen
class ScriptedCompletion:
    """One scripted completion: ``text`` (encoded with the tokenizer) or explicit ``token_ids``.

    ``end_of_turn`` appends the tokenizer's EOS id, as a model that stops naturally does.
    """

    text: str | None = None
    token_ids: tuple[int, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    end_of_turn: bool = True

    def __attrs_post_init__(self) -> None:
        if (self.text is None) == (self.token_ids is None):
            raise ConfigError("ScriptedCompletion needs exactly one of text and token_ids")


Script = (
    Sequence[str | ScriptedCompletion] | Callable[[TokenCompletionRequest, int], str | ScriptedCompletion]
)


class ScriptedTokenClient:
    """Replies from a script, in order; raises :class:`ConfigError` when the script runs out.

    Completions longer than ``sampling.max_tokens`` are cut with ``finish_reason="length"``.
    Logprobs (when requested) are deterministic pseudo-values derived from the seed and position.
    ``latency_s`` delays each answer (to exercise timeouts). ``requests`` records every request.
    """

    def __init__(self, tokenizer: Any, script: Script, *, latency_s: float = 0.0) -> None:
        if getattr(tokenizer, "eos_token_id", None) is None:
            raise ConfigError("ScriptedTokenClient needs a tokenizer with an eos_token_id")
        self.tokenizer = tokenizer
        self.script = script
        self.latency_s = latency_s
        self.requests: list[TokenCompletionRequest] = []

    def _next(self, request: TokenCompletionRequest, index: int) -> ScriptedCompletion:
        if callable(self.script):
            item = self.script(request, index)
        else:
            if index >= len(self.script):
                raise ConfigError(
                    f"ScriptedTokenClient ran out of completions after {len(self.script)} calls"
                )
            item = self.script[index]
        return ScriptedCompletion(text=item) if isinstance(item, str) else item

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        index = len(self.requests)
        self.requests.append(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        item = self._next(request, index)
        if item.token_ids is not None:
            ids = list(item.token_ids)
        else:
            ids = list(self.tokenizer.encode(item.text, add_special_tokens=False))
        if item.end_of_turn:
            ids.append(int(self.tokenizer.eos_token_id))
        finish_reason = "stop"
        if len(ids) > request.sampling.max_tokens:
            ids = ids[: request.sampling.max_tokens]
            finish_reason = "length"
        logprobs = None
        if request.return_.return_chosen_logprobs:
            base = 0 if request.seed is None else request.seed
            logprobs = [math.log(0.05 + 0.9 * derive_seed(base, i, t) / 2**31) for i, t in enumerate(ids)]
        # Prompt logprobs as ludic-core's scripted clients give them, so a teacher scorer can be tested
        # on this client too (an omitted field would break the ChatClient contract).
        prompt_logprobs = (
            [scripted_prompt_logprob(p, t) for p, t in enumerate(request.prompt_token_ids) if p > 0]
            if request.return_.return_prompt_logprobs
            else None
        )
        return ChatResponse(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            prompt_token_ids=request.prompt_token_ids,
            completion_token_ids=ids,
            completion_logprobs=logprobs,
            finish_reason=finish_reason,
            sampling_temperature=request.sampling.temperature,
            prompt_logprobs=prompt_logprobs,
        )
