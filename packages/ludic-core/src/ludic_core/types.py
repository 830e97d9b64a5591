"""Core value types shared by every Ludic package.

The token is the unit of truth: :class:`TokenTrace` holds exactly the ids that were sent to and sampled
from the model, and everything downstream (SAW items, Tinker datums) is built from traces, never from
re-tokenised text.

A :class:`Rollout` is one agent's view of one episode. Its timeline mixes two kinds of step:

* :class:`AgentStep` — one model call (including calls inside an internal tool loop);
* :class:`EnvironmentStep` — one env transition, listing the agent steps of the turn that produced it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from ludic_core.errors import DataError
from ludic_core.ids import new_id, seeded_ids  # re-exported: steps and rollouts take their ids from it

__all__ = [
    "JSON",
    "ActionTarget",
    "AgentStep",
    "ChatResponse",
    "EnvironmentStep",
    "EpisodeFailure",
    "FrozenMessage",
    "Info",
    "Message",
    "Rollout",
    "Step",
    "StepOutcome",
    "TokenTrace",
    "ToolCall",
    "ToolResult",
    "TruncationReason",
    "freeze_message",
    "freeze_messages",
    "new_id",
    "seeded_ids",
]

JSON: TypeAlias = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]
Info: TypeAlias = dict[str, Any]
"""Free-form, JSON-serialisable metadata. Never holds token lists (they live in traces)."""

Message: TypeAlias = dict[str, Any]
"""An OpenAI-style chat message: ``role``, ``content``; assistant messages may carry ``tool_calls``
(OpenAI format), tool messages ``tool_call_id`` and ``name``."""

ActionTarget: TypeAlias = Literal["internal", "external", "env"]
"""Where a model call's output goes: an internal tool loop, an external tool handler, or the env."""

TruncationReason: TypeAlias = Literal["env", "max_steps", "max_seq_len"]

ACTION_TARGETS: frozenset[str] = frozenset({"internal", "external", "env"})
TRUNCATION_REASONS: frozenset[str] = frozenset({"env", "max_steps", "max_seq_len"})


def is_strict_int(value: object) -> bool:
    """An int that is not a bool (``True`` is an int to Python, never a token id or a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def to_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    """attrs converter: any iterable (but not a string) to a tuple; element checks are validators."""
    if isinstance(values, (str, bytes)):
        raise DataError(f"expected a sequence, got {type(values).__name__} {values!r:.40}")
    return tuple(values)


def to_float_tuple_or_none(values: Iterable[Any] | None) -> tuple[Any, ...] | None:
    """attrs converter: numbers become floats, anything else is left for :func:`check_floats`."""
    if values is None:
        return None
    values = to_tuple(values)
    if set(map(type, values)) <= {float}:  # hot path (C speed): logprobs arrive as floats
        return values
    return tuple(float(v) if is_strict_int(v) or isinstance(v, float) else v for v in values)


def check_ints(_instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    if not value or set(map(type, value)) == {int}:  # hot path (C speed): every trace is checked
        return
    for i, v in enumerate(value):
        if not is_strict_int(v):
            raise DataError(f"{attribute.name}[{i}] must be an int, got {v!r}")


def check_floats(_instance: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...] | None) -> None:
    if not value or set(map(type, value)) == {float}:
        return
    for i, v in enumerate(value):
        if not isinstance(v, float):
            raise DataError(f"{attribute.name}[{i}] must be a number, got {v!r}")


def to_str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def to_float_or_none(value: Any) -> Any:
    """attrs converter: ints become floats; anything else is left for the validator."""
    return float(value) if is_strict_int(value) else value


def check_temperature(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A sampling temperature: ``None`` (unknown) or a finite float ``>= 0``."""
    if value is None:
        return
    if not isinstance(value, float) or not math.isfinite(value) or value < 0:
        raise DataError(
            f"{type(instance).__name__}.{attribute.name} must be None or a finite number >= 0, got {value!r}"
        )


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


def _slot_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The ``__set__`` of each slot of a slotted attrs class, in field order, for its ``_trusted``
    constructor to unpack.

    A frozen class refuses assignment, so a constructor that skips ``__init__`` must fill the slots
    some other way: ``object.__setattr__(obj, name, value)`` slices its argument tuple and looks the
    name up on the type for every field, where a slot's own setter skips both (about 30 ns less per
    field, ~57 fields per env step). A test compares each constructor with ``__init__`` field by
    field."""
    return tuple(cls.__dict__[field.name].__set__ for field in attrs.fields(cls))


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
        # The slots' own setters, in field order: a third cheaper than object.__setattr__ (_slot_setters).
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
_TOKEN_TRACE_SLOTS = _slot_setters(TokenTrace)


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


@attrs.frozen
class StepOutcome:
    """What an env returns for one agent after a step."""

    obs: str
    reward: float = attrs.field(default=0.0, converter=float)
    terminated: bool = False
    truncated: bool = False
    info: Info = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.obs, str):
            raise DataError(f"StepOutcome.obs must be a str, got {type(self.obs).__name__}: {self.obs!r}")
        if not math.isfinite(self.reward):
            raise DataError(f"StepOutcome.reward must be finite, got {self.reward!r}")


@attrs.frozen
class ToolCall:
    """A tool call the model made, in a backend-neutral form (arguments are the raw JSON text)."""

    id: str
    name: str
    arguments: str = "{}"

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        if "function" in data:  # OpenAI format
            fn = data["function"]
            return cls(id=str(data.get("id", "")), name=fn["name"], arguments=fn.get("arguments", "{}"))
        return cls(id=data["id"], name=data["name"], arguments=data.get("arguments", "{}"))


@attrs.frozen
class ToolResult:
    """The output of one tool call, as it is shown to the model."""

    tool_call_id: str
    tool_name: str
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "tool_name": self.tool_name, "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        return cls(tool_call_id=data["tool_call_id"], tool_name=data["tool_name"], content=data["content"])

    def to_message(self) -> Message:
        return {
            "role": "tool",
            "tool_call_id": self.tool_call_id,
            "name": self.tool_name,
            "content": self.content,
        }


def _tool_calls(values: Iterable[ToolCall | Mapping[str, Any]] | None) -> tuple[ToolCall, ...] | None:
    if values is None:
        return None
    return tuple(v if isinstance(v, ToolCall) else ToolCall.from_dict(v) for v in values)


def _tool_results(values: Iterable[ToolResult | Mapping[str, Any]] | None) -> tuple[ToolResult, ...] | None:
    if values is None:
        return None
    return tuple(v if isinstance(v, ToolResult) else ToolResult.from_dict(v) for v in values)


def _check_action_target(_i: Any, _a: attrs.Attribute[Any], value: str) -> None:
    if value not in ACTION_TARGETS:
        raise DataError(f"action_target must be one of {sorted(ACTION_TARGETS)}, got {value!r}")


def _check_truncation_reason(_i: Any, _a: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in TRUNCATION_REASONS:
        raise DataError(
            f"truncation_reason must be one of {sorted(TRUNCATION_REASONS)} or None, got {value!r}"
        )


def _finite(_i: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value):
        raise DataError(f"{attribute.name} must be finite, got {value!r}")


class FrozenMessage(dict[str, Any]):
    """A chat message that cannot change, so steps, contexts and prompts can share it instead of
    copying it.

    It is a ``dict`` (``m["role"]``, ``json.dumps``, ``==`` with plain dicts all work); every method
    that would change it raises ``TypeError``. Copies are plain, mutable dicts: to edit a message, copy
    it (``dict(m)``, ``copy.copy``, ``copy.deepcopy``). Freezing is shallow, as the step's own copy
    always was: nested values such as ``tool_calls`` lists are shared, and nothing in Ludic mutates them.
    """

    __slots__ = ()

    def _refuse(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError(
            f"a recorded message is immutable (role {self.get('role')!r}); copy it with dict(message) "
            "to change it"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle rebuilds dict subclasses item by item through __setitem__; rebuild from a dict instead.
        return (FrozenMessage, (dict(self),))


def freeze_message(message: Message) -> FrozenMessage:
    """``message`` itself when already frozen, else a frozen shallow copy (the one copy it gets)."""
    return message if type(message) is FrozenMessage else FrozenMessage(message)


_ONLY_FROZEN = frozenset({FrozenMessage})


def freeze_messages(values: Iterable[Message]) -> tuple[Message, ...]:
    """``values`` as a tuple of frozen messages: a tuple of them is returned as it is, others are frozen."""
    # Frozen messages are shared: a context that keeps its history frozen hands every prompt to its
    # steps without copying the conversation (once per call, quadratic over an episode). The type
    # check runs in C (a set of the element types), not as a Python loop over the conversation.
    values = tuple(values)  # the same object for a tuple
    if set(map(type, values)) <= _ONLY_FROZEN:
        return values
    return tuple(m if type(m) is FrozenMessage else FrozenMessage(m) for m in values)


@attrs.frozen
class AgentStep:
    """One model call.

    ``reward`` is what this call earns on its own: the parse-failure penalty for an env-targeted
    output that failed to parse, otherwise 0 (a successful parser reward moves onto the env step, see
    :class:`EnvironmentStep`). ``reward_components`` itemises it.
    """

    index: int
    trace: TokenTrace
    prompt_messages: tuple[Message, ...] = attrs.field(converter=freeze_messages)
    action: str
    action_target: ActionTarget = attrs.field(validator=_check_action_target)
    turn_id: str
    loop_index: int = 0
    reward: float = attrs.field(default=0.0, converter=float, validator=_finite)
    reward_components: dict[str, float] = attrs.field(factory=dict)
    parse_error: bool = False
    terminated: bool = False
    truncated: bool = False
    truncation_reason: TruncationReason | None = attrs.field(default=None, validator=_check_truncation_reason)
    tool_calls: tuple[ToolCall, ...] | None = attrs.field(default=None, converter=_tool_calls)
    tool_results: tuple[ToolResult, ...] | None = attrs.field(default=None, converter=_tool_results)
    info: Info = attrs.field(factory=dict)
    id: str = attrs.field(factory=new_id)
    ts_ns: int = attrs.field(factory=time.time_ns)

    kind: Literal["agent"] = attrs.field(default="agent", init=False)

    @classmethod
    def _trusted(
        cls,
        index: int,
        trace: TokenTrace,
        prompt_messages: tuple[Message, ...],
        action: str,
        action_target: ActionTarget,
        turn_id: str,
        loop_index: int,
        reward: float,
        reward_components: dict[str, float],
        parse_error: bool,
        terminated: bool,
        tool_calls: tuple[ToolCall, ...] | None,
        tool_results: tuple[ToolResult, ...] | None,
        info: Info,
    ) -> AgentStep:
        """Build from the fields of a checked :class:`~ludic_core.harness.AgentActStep` (messages
        frozen, target, tool calls and results converted) and a finite float reward from a checked
        :class:`~ludic_core.parsing.ParseResult`: the protocol's timeline records every model call this
        way instead of converting and checking the same values a second time. ``reward`` is still
        checked (cheap, and a duck-typed parse result may not be a ``ParseResult``). Not truncated (the
        timeline marks truncation with ``attrs.evolve``, which checks). Private: anything else goes
        through ``__init__``."""
        reward = float(reward)
        if not math.isfinite(reward):
            _finite(None, _AGENT_STEP_REWARD, reward)  # raises, naming the field
        step = object.__new__(cls)
        # The slots' own setters, in field order: a third cheaper than object.__setattr__ (_slot_setters).
        (
            set_index,
            set_trace,
            set_prompt_messages,
            set_action,
            set_action_target,
            set_turn_id,
            set_loop_index,
            set_reward,
            set_reward_components,
            set_parse_error,
            set_terminated,
            set_truncated,
            set_truncation_reason,
            set_tool_calls,
            set_tool_results,
            set_info,
            set_id,
            set_ts_ns,
            set_kind,
        ) = _AGENT_STEP_SLOTS
        set_index(step, index)
        set_trace(step, trace)
        set_prompt_messages(step, prompt_messages)
        set_action(step, action)
        set_action_target(step, action_target)
        set_turn_id(step, turn_id)
        set_loop_index(step, loop_index)
        set_reward(step, reward)
        set_reward_components(step, reward_components)
        set_parse_error(step, parse_error)
        set_terminated(step, terminated)
        set_truncated(step, False)
        set_truncation_reason(step, None)
        set_tool_calls(step, tool_calls)
        set_tool_results(step, tool_results)
        set_info(step, info)
        set_id(step, new_id())
        set_ts_ns(step, time.time_ns())
        set_kind(step, "agent")
        return step


@attrs.frozen
class EnvironmentStep:
    """One env transition for this agent.

    ``reward`` = env reward + the successful parser reward of the action (``reward_components`` holds
    ``{"env": ..., "parser": ...}``). ``trace`` is the trace of the turn's final model call and
    ``agent_step_ids`` lists every model call of the turn. ``next_obs`` is None when the episode ended
    here (terminated or truncated).
    """

    index: int
    trace: TokenTrace
    prev_obs: str
    action: str
    parsed_action: str
    next_obs: str | None
    turn_id: str
    source_agent_step_id: str
    agent_step_ids: tuple[str, ...] = attrs.field(converter=to_str_tuple)
    reward: float = attrs.field(default=0.0, converter=float, validator=_finite)
    reward_components: dict[str, float] = attrs.field(factory=dict)
    terminated: bool = False
    truncated: bool = False
    truncation_reason: TruncationReason | None = attrs.field(default=None, validator=_check_truncation_reason)
    info: Info = attrs.field(factory=dict)
    id: str = attrs.field(factory=new_id)
    ts_ns: int = attrs.field(factory=time.time_ns)

    kind: Literal["env"] = attrs.field(default="env", init=False)

    @classmethod
    def _trusted(
        cls,
        index: int,
        trace: TokenTrace,
        prev_obs: str,
        action: str,
        parsed_action: str,
        next_obs: str | None,
        turn_id: str,
        source_agent_step_id: str,
        agent_step_ids: tuple[str, ...],
        reward: float,
        reward_components: dict[str, float],
        terminated: bool,
        truncated: bool,
        info: Info,
    ) -> EnvironmentStep:
        """Build from a recorded :class:`AgentStep` and a checked :class:`StepOutcome` (finite float
        rewards, a str obs): the timeline's env steps skip the converters those values already passed.
        ``reward`` is still checked here: a sum of two finite floats can overflow. The truncation
        reason follows ``truncated`` (``"env"``). Private: anything else goes through ``__init__``."""
        if not math.isfinite(reward):
            _finite(None, _ENV_STEP_REWARD, reward)  # raises, naming the field
        step = object.__new__(cls)
        # The slots' own setters, in field order: a third cheaper than object.__setattr__ (_slot_setters).
        (
            set_index,
            set_trace,
            set_prev_obs,
            set_action,
            set_parsed_action,
            set_next_obs,
            set_turn_id,
            set_source_agent_step_id,
            set_agent_step_ids,
            set_reward,
            set_reward_components,
            set_terminated,
            set_truncated,
            set_truncation_reason,
            set_info,
            set_id,
            set_ts_ns,
            set_kind,
        ) = _ENVIRONMENT_STEP_SLOTS
        set_index(step, index)
        set_trace(step, trace)
        set_prev_obs(step, prev_obs)
        set_action(step, action)
        set_parsed_action(step, parsed_action)
        set_next_obs(step, next_obs)
        set_turn_id(step, turn_id)
        set_source_agent_step_id(step, source_agent_step_id)
        set_agent_step_ids(step, agent_step_ids)
        set_reward(step, reward)
        set_reward_components(step, reward_components)
        set_terminated(step, terminated)
        set_truncated(step, truncated)
        set_truncation_reason(step, "env" if truncated else None)
        set_info(step, info)
        set_id(step, new_id())
        set_ts_ns(step, time.time_ns())
        set_kind(step, "env")
        return step


_AGENT_STEP_REWARD = attrs.fields(AgentStep).reward
_AGENT_STEP_SLOTS = _slot_setters(AgentStep)
_ENVIRONMENT_STEP_SLOTS = _slot_setters(EnvironmentStep)
_TRUNCATION_REASON = attrs.fields(AgentStep).truncation_reason
_STEP_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in attrs.fields(cls)) for cls in (AgentStep, EnvironmentStep)
}


def _mark_step_truncated(step: Step, reason: TruncationReason, info: Info) -> Step:
    """``attrs.evolve(step, truncated=True, truncation_reason=reason, info=info)`` (and ``next_obs=None``
    on an env step) without re-running the converters of the fields it keeps: they were checked when
    ``step`` was built. ``reason`` is checked. Same id and timestamp, as with evolve."""
    _check_truncation_reason(None, _TRUNCATION_REASON, reason)
    changes: dict[str, Any] = {"truncated": True, "truncation_reason": reason, "info": info}
    if type(step) is EnvironmentStep:
        changes["next_obs"] = None
    marked = object.__new__(type(step))
    set_field = object.__setattr__
    for name in _STEP_FIELDS[type(step)]:
        set_field(marked, name, changes[name] if name in changes else getattr(step, name))
    return marked


_ENV_STEP_REWARD = attrs.fields(EnvironmentStep).reward


Step: TypeAlias = AgentStep | EnvironmentStep


@attrs.frozen
class EpisodeFailure:
    """Why an episode failed: where (``env``, ``agent``, ``client``, ``timeout``, ``protocol``), the
    exception type and message, and the formatted traceback."""

    stage: str
    error_type: str
    message: str
    traceback: str = ""

    def to_dict(self) -> dict[str, str]:
        return attrs.asdict(self)

    @classmethod
    def from_exception(cls, stage: str, exc: BaseException) -> EpisodeFailure:
        import traceback as tb

        return cls(
            stage=stage,
            error_type=type(exc).__name__,
            message=str(exc),
            traceback="".join(tb.format_exception(type(exc), exc, exc.__traceback__)),
        )


@attrs.define
class Rollout:
    """One agent's view of one episode."""

    steps: list[Step] = attrs.field(factory=list)
    meta: Info = attrs.field(factory=dict)
    failure: EpisodeFailure | None = None
    id: str = attrs.field(factory=new_id)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def total_reward(self) -> float:
        """Env-step rewards plus the penalties of env-targeted outputs that failed to parse.

        This is the episode's return as an RL algorithm sees it: every env reward (which already
        includes successful parser rewards) and every format penalty that stopped an action from
        reaching the env. Rewards on internal or external tool-loop steps are not counted.
        """
        total = 0.0
        for step in self.steps:
            if isinstance(step, EnvironmentStep) or (step.action_target == "env" and step.parse_error):
                total += step.reward
        return total

    def total_reward_all(self) -> float:
        """Sum of every step's reward, whatever its kind or target."""
        return sum(s.reward for s in self.steps)

    @property
    def agent_steps(self) -> list[AgentStep]:
        return [s for s in self.steps if isinstance(s, AgentStep)]

    @property
    def env_steps(self) -> list[EnvironmentStep]:
        return [s for s in self.steps if isinstance(s, EnvironmentStep)]

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def duration_s(self) -> float:
        if not self.steps:
            return 0.0
        return (self.steps[-1].ts_ns - self.steps[0].ts_ns) / 1e9

    @property
    def truncated(self) -> bool:
        return bool(self.meta.get("episode_truncated", False))

    @property
    def truncation_reason(self) -> str | None:
        reason = self.meta.get("truncation_reason")
        return None if reason is None else str(reason)
