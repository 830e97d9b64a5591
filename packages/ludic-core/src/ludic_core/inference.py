"""The inference contract: token ids in, token ids + chosen-token logprobs out.

Agents render prompts locally with the model's chat template and send the ids; the ids they sent are
canonical. Implementations: the in-process policy (``ludic_train``), vLLM (``ludic_vllm``), Tinker
(``ludic_tinker``) and scripted clients for tests (``ludic_core.testing``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_core.data_fields import check_ints, is_strict_int, to_tuple
from ludic_core.errors import ConfigError
from ludic_core.traces import ChatResponse

__all__ = [
    "FINISH_REASONS",
    "ChatClient",
    "InferenceSpec",
    "ReturnSpec",
    "SamplingParams",
    "TokenCompletionRequest",
    "VersionedClient",
]

FINISH_REASONS: frozenset[str] = frozenset({"stop", "length", "abort", "tool_calls"})
"""The finish reasons clients report. ``length`` means the completion hit ``max_tokens``; ``abort``
means the server cancelled the request (e.g. a shutdown)."""


def _str_tuple(values: Iterable[str] | str | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        return (values,)
    return tuple(values)


def _check(condition: bool, field: str, value: Any, rule: str) -> None:
    if not condition:
        raise ConfigError(f"SamplingParams.{field} must be {rule}, got {value!r}")


@attrs.frozen
class SamplingParams:
    """Backend-neutral sampling parameters. A backend that cannot honour one reports it.

    ``temperature`` defaults to 1, the library's one default: the policy's own distribution, which is
    what on-policy RL samples and what the losses score; every other default sampling temperature
    (run configs, evaluation) is read from here."""

    temperature: float = 1.0
    max_tokens: int = 256
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    stop_token_ids: tuple[int, ...] = attrs.field(default=(), converter=to_tuple, validator=check_ints)

    def __attrs_post_init__(self) -> None:
        _check(
            math.isfinite(self.temperature) and self.temperature >= 0, "temperature", self.temperature, ">= 0"
        )
        _check(
            is_strict_int(self.max_tokens) and self.max_tokens >= 1,
            "max_tokens",
            self.max_tokens,
            "an int >= 1",
        )
        _check(0 < self.top_p <= 1, "top_p", self.top_p, "in (0, 1]")
        _check(self.top_k is None or self.top_k >= 1, "top_k", self.top_k, "None or >= 1")
        _check(0 <= self.min_p <= 1, "min_p", self.min_p, "in [0, 1]")
        _check(self.repetition_penalty > 0, "repetition_penalty", self.repetition_penalty, "> 0")

    def non_default_fields(self) -> dict[str, Any]:
        """Fields that differ from their defaults: what a backend must honour or report."""
        default = SamplingParams()
        return {
            f.name: getattr(self, f.name)
            for f in attrs.fields(SamplingParams)
            if getattr(self, f.name) != getattr(default, f.name)
        }


@attrs.frozen
class ReturnSpec:
    """What a client must return besides the completion ids.

    ``return_prompt_logprobs`` asks for the logprob of every prompt token after the first under the
    model's plain distribution (see :class:`~ludic_core.traces.ChatResponse`): what a teacher scores a
    student's tokens with (:class:`~ludic_core.teachers.TeacherScorer`).
    """

    return_chosen_logprobs: bool = False
    top_logprobs_k: int = 1
    return_prompt_logprobs: bool = False

    def __attrs_post_init__(self) -> None:
        if self.top_logprobs_k < 1:
            raise ConfigError(f"ReturnSpec.top_logprobs_k must be >= 1, got {self.top_logprobs_k!r}")

    @classmethod
    def for_rl(cls) -> ReturnSpec:
        """Chosen-token logprobs of the behaviour policy, needed by every ratio-based loss."""
        return cls(return_chosen_logprobs=True)


@attrs.frozen
class InferenceSpec:
    """Per-rollout inference configuration, carried from the request through the protocol to the agent.

    ``extensions`` holds backend-specific options keyed by backend name (e.g. ``{"vllm": {...}}``); a
    backend rejects keys it does not know instead of ignoring them.
    """

    sampling: SamplingParams = attrs.field(factory=SamplingParams)
    return_: ReturnSpec = attrs.field(factory=ReturnSpec)
    extensions: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class TokenCompletionRequest:
    """One completion request: the prompt as token ids (canonical) plus how to sample."""

    prompt_token_ids: tuple[int, ...] = attrs.field(converter=to_tuple, validator=check_ints)
    sampling: SamplingParams = attrs.field(factory=SamplingParams)
    return_: ReturnSpec = attrs.field(factory=ReturnSpec)
    seed: int | None = None
    model: str | None = None
    prompt_text: str | None = None
    extensions: Mapping[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ConfigError("TokenCompletionRequest.prompt_token_ids must not be empty")
        if self.seed is not None and not is_strict_int(self.seed):
            raise ConfigError(f"TokenCompletionRequest.seed must be an int or None, got {self.seed!r}")

    @classmethod
    def from_spec(
        cls,
        prompt_token_ids: Iterable[int],
        spec: InferenceSpec,
        *,
        seed: int | None = None,
        model: str | None = None,
        prompt_text: str | None = None,
    ) -> TokenCompletionRequest:
        return cls(
            prompt_token_ids=tuple(prompt_token_ids),
            sampling=spec.sampling,
            return_=spec.return_,
            seed=seed,
            model=model,
            prompt_text=prompt_text,
            extensions=spec.extensions,
        )


@runtime_checkable
class ChatClient(Protocol):
    """An async token-in/token-out completion client.

    Contract (checked by :func:`ludic_core.testing.check_client`):

    * the returned ``prompt_token_ids`` equal the request's;
    * ``len(completion_token_ids) <= sampling.max_tokens``; ``finish_reason == "length"`` when the
      limit cut the completion;
    * when ``return_.return_chosen_logprobs`` is set, one logprob per completion token (after
      temperature: ``log softmax(logits / temperature)``; at temperature 0, greedy decoding, the
      untempered ``log softmax(logits)``); otherwise logprobs may be omitted;
    * ``ChatResponse.sampling_temperature`` is the temperature those logprobs are under (trainers
      score the same distribution); every client in Ludic reports the request's. ``None`` (not
      reported) lets the protocol record the temperature it asked the agent to sample with, on a copy
      of the trace;
    * when ``return_.return_prompt_logprobs`` is set, ``prompt_logprobs`` has ``len(prompt_token_ids) - 1``
      entries, entry ``i`` being ``log p(prompt[i+1] | prompt[:i+1])`` under the untempered, unfiltered
      distribution ``log softmax(logits)`` whatever the sampling parameters; a client that cannot compute
      them raises a :class:`~ludic_core.errors.ConfigError` naming ``return_prompt_logprobs``;
    * the same ``seed`` and request give the same completion wherever the backend can promise it;
    * failures raise :class:`~ludic_core.errors.LudicError` subclasses, never return placeholders.
    """

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse: ...


@runtime_checkable
class VersionedClient(ChatClient, Protocol):
    """A client whose weights carry a version (the trainer step that produced them).

    ``get_policy_version`` raises on failure; it never guesses (a default of 0 would silently mislabel
    data for staleness control).
    """

    async def get_policy_version(self) -> int: ...
