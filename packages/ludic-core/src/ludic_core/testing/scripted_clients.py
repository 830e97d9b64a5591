"""Scripted chat clients: deterministic ``ChatClient``s that return real token ids.

They are real implementations of the contract (validated requests, ``max_tokens`` cut-off with
``finish_reason="length"``, one logprob per token when asked, per-request seeds), so protocols,
agents and the engine can be tested end to end without a model.

Prompt logprobs (``ReturnSpec.return_prompt_logprobs``) are :func:`scripted_prompt_logprob` of each
prompt token after the first: a fixed, seed-free function of the token's position and id, so a test can
compute the value a scripted teacher gives any token by hand.
"""

from __future__ import annotations

import abc
import asyncio
import math
import random
from collections.abc import Callable, Sequence

from ludic_core.errors import ConfigError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.seeding import derive_seed
from ludic_core.testing.tokenizers import ByteTokenizer, Encode
from ludic_core.types import ChatResponse

__all__ = ["ScriptedChatClient", "SeededChatClient", "TextChatClient", "scripted_prompt_logprob"]

ResponseFn = Callable[[TokenCompletionRequest, int], str]


def _pseudo_logprob(seed: int | None, position: int, token_id: int) -> float:
    # Deterministic, strictly negative and token-dependent, so alignment bugs show up in tests.
    u = derive_seed(0 if seed is None else seed, position, token_id) / 2**31
    return math.log(0.05 + 0.9 * u)


def scripted_prompt_logprob(position: int, token_id: int) -> float:
    """The logprob the scripted clients give the prompt token ``token_id`` at ``position`` (>= 1).

    Strictly negative, different for neighbouring positions and ids (an off-by-one in a consumer shows
    up), and independent of the request's seed and sampling parameters, as prompt logprobs of the
    plain distribution are.
    """
    u = derive_seed(0, "prompt_logprob", position, token_id) / 2**31
    return math.log(0.05 + 0.9 * u)


class TextChatClient(abc.ABC):
    """Base: turns the text chosen by :meth:`choose_text` into a contract-abiding ChatResponse."""

    def __init__(
        self,
        *,
        encode: Encode | None = None,
        decode: Callable[[Sequence[int]], str] | None = None,
        latency_s: float = 0.0,
        policy_version: int | None = None,
    ) -> None:
        tokenizer = ByteTokenizer()
        self.encode: Encode = encode or tokenizer.encode
        self.decode = decode or (tokenizer.decode if encode is None else None)
        self.latency_s = latency_s
        self.policy_version = policy_version
        self.calls = 0
        self.requests: list[TokenCompletionRequest] = []

    @abc.abstractmethod
    def choose_text(self, request: TokenCompletionRequest, call_index: int) -> str:
        """The completion text for this request (it is then tokenised and cut at ``max_tokens``)."""

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        if not isinstance(request, TokenCompletionRequest):
            raise ConfigError(
                f"complete_tokens expects a TokenCompletionRequest, got {type(request).__name__}"
            )
        call_index = self.calls
        self.calls += 1
        self.requests.append(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self.choose_text(request, call_index)
        ids = list(self.encode(text))
        finish_reason = "stop"
        if len(ids) > request.sampling.max_tokens:
            ids = ids[: request.sampling.max_tokens]
            finish_reason = "length"
            text = self.decode(ids) if self.decode is not None else text
        logprobs = (
            [_pseudo_logprob(request.seed, i, t) for i, t in enumerate(ids)]
            if request.return_.return_chosen_logprobs
            else None
        )
        prompt = request.prompt_token_ids
        prompt_logprobs = (
            [scripted_prompt_logprob(p, prompt[p]) for p in range(1, len(prompt))]
            if request.return_.return_prompt_logprobs
            else None
        )
        return ChatResponse(
            text=text,
            prompt_token_ids=request.prompt_token_ids,
            completion_token_ids=ids,
            completion_logprobs=logprobs,
            finish_reason=finish_reason,
            policy_version_start=self.policy_version,
            policy_version_end=self.policy_version,
            # Reported as a real client reports it, so the trace is complete where it is made.
            sampling_temperature=request.sampling.temperature,
            prompt_logprobs=prompt_logprobs,
        )

    async def get_policy_version(self) -> int:
        if self.policy_version is None:
            raise ConfigError("this scripted client was built without a policy_version")
        return self.policy_version


class ScriptedChatClient(TextChatClient):
    """Replies from a script: a list consumed in order (cycling when ``cycle=True``) or a function
    ``(request, call_index) -> text``."""

    def __init__(
        self, responses: Sequence[str] | ResponseFn, *, cycle: bool = False, **kwargs: object
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if not callable(responses) and not responses:
            raise ConfigError("ScriptedChatClient needs at least one response")
        self.responses = responses
        self.cycle = cycle

    def choose_text(self, request: TokenCompletionRequest, call_index: int) -> str:
        if callable(self.responses):
            return self.responses(request, call_index)
        if call_index >= len(self.responses) and not self.cycle:
            raise ConfigError(
                f"ScriptedChatClient ran out of responses after {len(self.responses)} calls (pass cycle=True to loop)"
            )
        return self.responses[call_index % len(self.responses)]


class SeededChatClient(TextChatClient):
    """Picks one of ``choices`` with an RNG seeded by the request seed: the same seed gives the same
    text, different seeds cover the choices. Requests without a seed draw from the client's own RNG
    (seeded at construction), so whole runs stay reproducible."""

    def __init__(self, choices: Sequence[str], *, seed: int = 0, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if not choices:
            raise ConfigError("SeededChatClient needs at least one choice")
        self.choices = list(choices)
        self._rng = random.Random(seed)

    def choose_text(self, request: TokenCompletionRequest, call_index: int) -> str:
        rng = self._rng if request.seed is None else random.Random(request.seed)
        return rng.choice(self.choices)
