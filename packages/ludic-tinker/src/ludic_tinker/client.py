"""Tinker sampling as a Ludic :class:`~ludic_core.inference.ChatClient`.

Token ids in, token ids + chosen-token logprobs + finish reason out. The prompt ids the agent sent are
canonical: they go to Tinker as one ``EncodedTextChunk`` and come back unchanged in the response.
Prompt logprobs (``ReturnSpec.return_prompt_logprobs``) are Tinker's ``include_prompt_logprobs``, the
values its ``compute_logprobs`` returns: one per prompt token, ``None`` for the first (dropped here).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import tinker

from ludic_core.errors import ConfigError, DataError, LudicError
from ludic_core.inference import SamplingParams, TokenCompletionRequest
from ludic_core.logs import get_logger
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S
from ludic_core.types import ChatResponse
from ludic_tinker._sdk import wait_result

__all__ = ["Decoder", "TinkerChatClient", "UnsupportedPolicy"]

log = get_logger(__name__)

UnsupportedPolicy = Literal["raise", "report"]

# Sampling fields Tinker has no parameter for, with the value that means "off".
_UNSUPPORTED_DEFAULTS: dict[str, Any] = {
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
}


class Decoder(Protocol):
    """Anything with ``decode(ids)`` (a tokenizer); ``skip_special_tokens=True`` is passed when accepted."""

    def decode(self, ids: Sequence[int]) -> str: ...


def _decode_kwargs(tokenizer: Any) -> dict[str, Any]:
    # Hugging Face tokenizers keep special tokens (e.g. EOS) in the text unless told otherwise.
    try:
        params = inspect.signature(tokenizer.decode).parameters
    except (TypeError, ValueError):
        return {}
    accepts = "skip_special_tokens" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    return {"skip_special_tokens": True} if accepts else {}


class TinkerChatClient:
    """A ``ChatClient`` (and ``VersionedClient``) backed by a ``tinker.SamplingClient``.

    * ``tokenizer`` decodes completions into ``ChatResponse.text`` (the ids stay canonical).
    * ``unsupported``: what to do with sampling options Tinker cannot honour (``min_p``, penalties,
      ``top_logprobs_k > 1``, stop strings together with stop token ids): ``"raise"`` a
      :class:`~ludic_core.errors.ConfigError`, or ``"report"`` them in ``info["ignored_sampling_params"]``
      and a warning, and sample without them.
    * :meth:`set_sampling_client` swaps in new weights together with their policy version (the trainer
      step that produced them); a request keeps the sampler it started with, so
      ``policy_version_start == policy_version_end`` always holds.

    Logprobs are Tinker's chosen-token logprobs. Tinker is reported to return them untempered
    (tinker-feedback #148), so for ratio-based RL keep ``temperature=1``; a request that asks for
    logprobs at another temperature gets ``info["logprobs_may_be_untempered"] = True``.
    """

    def __init__(
        self,
        sampling_client: Any,
        tokenizer: Decoder,
        *,
        policy_version: int | None = None,
        timeout_s: float = DEFAULT_MODEL_CALL_TIMEOUT_S,
        unsupported: UnsupportedPolicy = "raise",
    ) -> None:
        if unsupported not in ("raise", "report"):
            raise ConfigError(f"unsupported must be 'raise' or 'report', got {unsupported!r}")
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not callable(getattr(tokenizer, "decode", None)):
            raise ConfigError(f"tokenizer must have a decode(ids) method, got {type(tokenizer).__name__}")
        self._sampling_client = sampling_client
        self._policy_version = policy_version
        self.tokenizer = tokenizer
        self._decode_kwargs = _decode_kwargs(tokenizer)
        self.timeout_s = timeout_s
        self.unsupported = unsupported

    # ------------------------------------------------------------------ weights / versions

    @property
    def sampling_client(self) -> Any:
        return self._sampling_client

    @property
    def policy_version(self) -> int | None:
        return self._policy_version

    def set_sampling_client(self, sampling_client: Any, *, policy_version: int | None) -> None:
        """Use new weights from now on; requests already running finish on the old sampler."""
        self._sampling_client = sampling_client
        self._policy_version = policy_version
        log.debug("tinker.sampler_swapped", policy_version=policy_version)

    async def get_policy_version(self) -> int:
        if self._policy_version is None:
            raise LudicError("this TinkerChatClient's sampler has no policy version (none was given)")
        return self._policy_version

    # ------------------------------------------------------------------ sampling

    def to_tinker_sampling_params(
        self, sampling: SamplingParams, *, seed: int | None, top_logprobs_k: int = 1
    ) -> tuple[tinker.SamplingParams, list[str]]:
        """The Tinker ``SamplingParams`` for a Ludic request, and the names of options it drops."""
        ignored = [
            name
            for name, off in _UNSUPPORTED_DEFAULTS.items()
            if not math.isclose(getattr(sampling, name), off)
        ]
        if top_logprobs_k > 1:
            ignored.append("top_logprobs_k")
        stop: list[str] | list[int] | None = None
        if sampling.stop and sampling.stop_token_ids:
            # Tinker takes either stop strings or stop token ids, not both; ids are exact, so keep them.
            ignored.append("stop")
            stop = list(sampling.stop_token_ids)
        elif sampling.stop_token_ids:
            stop = list(sampling.stop_token_ids)
        elif sampling.stop:
            stop = list(sampling.stop)
        if ignored and self.unsupported == "raise":
            values = {name: getattr(sampling, name, top_logprobs_k) for name in ignored}
            raise ConfigError(
                f"Tinker cannot honour these sampling options: {values}; drop them, or build "
                "TinkerChatClient(unsupported='report') to sample without them"
            )
        params = tinker.SamplingParams(
            max_tokens=sampling.max_tokens,
            seed=seed,
            stop=stop,
            temperature=sampling.temperature,
            top_k=-1 if sampling.top_k is None else sampling.top_k,
            top_p=sampling.top_p,
        )
        return params, ignored

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        tinker_ext = request.extensions.get("tinker")
        if tinker_ext:
            raise ConfigError(
                f"TokenCompletionRequest.extensions['tinker'] has keys {sorted(tinker_ext)}; "
                "the Tinker client takes no backend extensions"
            )
        params, ignored = self.to_tinker_sampling_params(
            request.sampling, seed=request.seed, top_logprobs_k=request.return_.top_logprobs_k
        )
        if ignored:
            log.warning("tinker.sampling_options_ignored", options=ignored)
        sampler, version = self._sampling_client, self._policy_version
        if sampler is None:
            raise ConfigError(
                "this TinkerChatClient has no sampler yet: pass one, or let TinkerTrainer.refresh_sampler() set it"
            )
        # Only when asked: the flag makes Tinker score every prompt position.
        extra = {"include_prompt_logprobs": True} if request.return_.return_prompt_logprobs else {}
        future = sampler.sample(
            prompt=tinker.ModelInput.from_ints(list(request.prompt_token_ids)),
            num_samples=1,
            sampling_params=params,
            **extra,
        )
        response = await wait_result(future, timeout_s=self.timeout_s, what="sample")
        if len(response.sequences) != 1:
            raise DataError(f"Tinker returned {len(response.sequences)} sequences for num_samples=1")
        prompt_logprobs = (
            _prompt_logprobs(response.prompt_logprobs, len(request.prompt_token_ids))
            if request.return_.return_prompt_logprobs
            else None
        )
        seq = response.sequences[0]
        tokens = [int(t) for t in seq.tokens]
        logprobs = None if seq.logprobs is None else [float(x) for x in seq.logprobs]
        if request.return_.return_chosen_logprobs and logprobs is None:
            raise DataError("Tinker returned no logprobs, but the request asked for chosen-token logprobs")
        if logprobs is not None and len(logprobs) != len(tokens):
            raise DataError(f"Tinker returned {len(logprobs)} logprobs for {len(tokens)} tokens")
        if len(tokens) > request.sampling.max_tokens:
            raise DataError(
                f"Tinker returned {len(tokens)} tokens, more than max_tokens={request.sampling.max_tokens}"
            )
        finish_reason = {"length": "length", "stop": "stop"}.get(seq.stop_reason)
        if finish_reason is None:
            raise DataError(f"Tinker returned an unknown stop_reason {seq.stop_reason!r}")
        info: dict[str, Any] = {
            "backend": "tinker",
            "prompt_tokens": len(request.prompt_token_ids),
            "completion_tokens": len(tokens),
        }
        if ignored:
            info["ignored_sampling_params"] = ignored
        if request.return_.return_chosen_logprobs and not math.isclose(request.sampling.temperature, 1.0):
            info["logprobs_may_be_untempered"] = True
        sequence_id = getattr(seq, "sequence_id", None)  # absent before SDK 0.30
        if sequence_id is not None:
            info["sequence_id"] = str(sequence_id)
        return ChatResponse(
            text=self.tokenizer.decode(tokens, **self._decode_kwargs),
            prompt_token_ids=request.prompt_token_ids,
            completion_token_ids=tokens,
            completion_logprobs=logprobs,
            finish_reason=finish_reason,
            policy_version_start=version,
            policy_version_end=version,
            info=info,
            sampling_temperature=request.sampling.temperature,
            prompt_logprobs=prompt_logprobs,
        )


def _prompt_logprobs(values: Sequence[float | None] | None, prompt_length: int) -> list[float]:
    """Tinker's prompt logprobs (``None`` at position 0) as one float per prompt token after the first."""
    if values is None:
        raise DataError(
            "Tinker returned no prompt logprobs, but the request asked for them (return_prompt_logprobs)"
        )
    if len(values) != prompt_length:
        raise DataError(
            f"Tinker returned {len(values)} prompt logprobs for a {prompt_length}-token prompt; expected one per token"
        )
    missing = [i for i in range(1, prompt_length) if values[i] is None]
    if missing:
        raise DataError(f"Tinker returned no prompt logprob at prompt positions {missing[:20]}")
    return [float(v) for v in values[1:] if v is not None]
