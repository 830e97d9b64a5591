"""The exact tokens of a model call, the unit of truth: :class:`TokenTrace` holds exactly the ids that
were sent to and sampled from the model, and everything downstream (SAW items, Tinker datums) is built
from traces, never from re-tokenised text. :class:`ChatResponse` is what a client returns for one
completion request; its trace is :meth:`ChatResponse.to_trace`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ludic_core.data_fields import (
    check_floats,
    check_ints,
    check_temperature,
    slot_setters,
    to_float_or_none,
    to_float_tuple_or_none,
    to_tuple,
)
from ludic_core.errors import DataError

__all__ = ["ChatResponse", "TokenTrace"]


def _check_logprobs_length(instance: Any, _attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and len(value) != len(instance.completion_token_ids):
        raise DataError(
            f"completion_logprobs has {len(value)} entries but completion_token_ids has "
            f"{len(instance.completion_token_ids)}; they must match one to one"
        )


def _check_prompt_logprobs_length(instance: Any, _attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and len(value) != max(len(instance.prompt_token_ids) - 1, 0):
        raise DataError(
            f"prompt_logprobs has {len(value)} entries but prompt_token_ids has "
            f"{len(instance.prompt_token_ids)}; it must have one per prompt token after the first "
            f"({max(len(instance.prompt_token_ids) - 1, 0)})"
        )


@attrs.frozen
class TokenTrace:
    """The exact tokens of one model call: the single source of truth for training.

    ``completion_logprobs`` are the behaviour policy's chosen-token logprobs (after temperature),
    one per completion token, or ``None`` when the backend was not asked for them.
    ``sampling_temperature`` is the temperature the call sampled with, so the logprobs are those of
    ``softmax(logits / sampling_temperature)``; 0 means greedy decoding, whose logprobs are untempered
    (``softmax(logits)``). ``None``: unknown, from a client that does not report it (every Ludic
    client does: :func:`ludic_core.testing.check_client` checks it); trainers score such a trace at 1.
    """

    prompt_token_ids: tuple[int, ...] = attrs.field(converter=to_tuple, validator=check_ints)
    completion_token_ids: tuple[int, ...] = attrs.field(converter=to_tuple, validator=check_ints)
    completion_logprobs: tuple[float, ...] | None = attrs.field(
        default=None, converter=to_float_tuple_or_none, validator=[check_floats, _check_logprobs_length]
    )
    finish_reason: str | None = None
    sampling_temperature: float | None = attrs.field(
        default=None, converter=to_float_or_none, validator=check_temperature
    )

    @classmethod
    def _trusted(
        cls,
        prompt_token_ids: tuple[int, ...],
        completion_token_ids: tuple[int, ...],
        completion_logprobs: tuple[float, ...] | None,
        finish_reason: str | None,
        sampling_temperature: float | None,
    ) -> TokenTrace:
        """Build from fields that already passed these validators (a :class:`ChatResponse`'s, or another
        trace's): token tuples are checked once where they enter, not again in every object they pass
        through. Private: anything else goes through ``__init__``."""
        trace = object.__new__(cls)
        # The slots' own setters, in field order: a third cheaper than object.__setattr__ (slot_setters).
        (
            set_prompt_token_ids,
            set_completion_token_ids,
            set_completion_logprobs,
            set_finish_reason,
            set_sampling_temperature,
        ) = _TOKEN_TRACE_SLOTS
        set_prompt_token_ids(trace, prompt_token_ids)
        set_completion_token_ids(trace, completion_token_ids)
        set_completion_logprobs(trace, completion_logprobs)
        set_finish_reason(trace, finish_reason)
        set_sampling_temperature(trace, sampling_temperature)
        return trace

    def with_sampling_temperature(self, temperature: float | None) -> TokenTrace:
        """This trace with ``sampling_temperature`` replaced; only the new value is validated."""
        value = to_float_or_none(temperature)
        check_temperature(self, _TRACE_TEMPERATURE, value)
        return TokenTrace._trusted(
            self.prompt_token_ids,
            self.completion_token_ids,
            self.completion_logprobs,
            self.finish_reason,
            value,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_token_ids": list(self.prompt_token_ids),
            "completion_token_ids": list(self.completion_token_ids),
            "completion_logprobs": None
            if self.completion_logprobs is None
            else list(self.completion_logprobs),
            "finish_reason": self.finish_reason,
            "sampling_temperature": self.sampling_temperature,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenTrace:
        missing = [k for k in ("prompt_token_ids", "completion_token_ids") if k not in data]
        if missing:
            raise DataError(f"TokenTrace data is missing {missing}; got keys {sorted(data)}")
        return cls(
            prompt_token_ids=data["prompt_token_ids"],
            completion_token_ids=data["completion_token_ids"],
            completion_logprobs=data.get("completion_logprobs"),
            finish_reason=data.get("finish_reason"),
            # Absent in traces written before the field existed: unknown.
            sampling_temperature=data.get("sampling_temperature"),
        )


_TRACE_TEMPERATURE = attrs.fields(TokenTrace).sampling_temperature
_TOKEN_TRACE_SLOTS = slot_setters(TokenTrace)


@attrs.frozen
class ChatResponse:
    """What a :class:`~ludic_core.inference.ChatClient` returns for one completion request.

    ``policy_version_start``/``_end`` are the weights version the server reported when the request
    started and finished (``None`` for unversioned clients). If they differ, the completion may mix
    policies (a weight update landed mid-generation). ``sampling_temperature``: the temperature the
    completion was sampled with and its logprobs computed under (see :class:`TokenTrace`), or ``None``
    when the client does not report it.

    ``prompt_logprobs`` (only when the request set ``ReturnSpec.return_prompt_logprobs``): one entry
    per prompt token after the first, ``prompt_logprobs[i] = log p(prompt[i+1] | prompt[:i+1])`` under
    the model's plain distribution (``log softmax(logits)``: temperature 1, no top-k / top-p / min-p),
    whatever the request's sampling parameters. The first prompt token has no context, so no entry.
    """

    text: str
    prompt_token_ids: tuple[int, ...] = attrs.field(converter=to_tuple, validator=check_ints)
    completion_token_ids: tuple[int, ...] = attrs.field(converter=to_tuple, validator=check_ints)
    completion_logprobs: tuple[float, ...] | None = attrs.field(
        default=None, converter=to_float_tuple_or_none, validator=[check_floats, _check_logprobs_length]
    )
    finish_reason: str | None = None
    policy_version_start: int | None = None
    policy_version_end: int | None = None
    info: Mapping[str, Any] = attrs.field(factory=dict)
    sampling_temperature: float | None = attrs.field(
        default=None, converter=to_float_or_none, validator=check_temperature
    )
    prompt_logprobs: tuple[float, ...] | None = attrs.field(
        default=None,
        converter=to_float_tuple_or_none,
        validator=[check_floats, _check_prompt_logprobs_length],
    )

    @property
    def policy_version(self) -> int | None:
        """The version the whole completion was sampled with, or None if unknown or mixed."""
        if self.policy_version_start is None or self.policy_version_start != self.policy_version_end:
            return None
        return self.policy_version_start

    def to_trace(self) -> TokenTrace:
        # The response's validators already checked every field a trace has (same converters, same
        # checks), so the trace shares its tuples instead of converting and checking them again.
        return TokenTrace._trusted(
            self.prompt_token_ids,
            self.completion_token_ids,
            self.completion_logprobs,
            self.finish_reason,
            self.sampling_temperature,
        )
