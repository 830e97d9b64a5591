"""Core value types shared by every Ludic package: what an env returns (:class:`StepOutcome`) and what
an episode records. The token traces of model calls are :mod:`ludic_core.traces`'s and the chat messages
and tool calls :mod:`ludic_core.messages`'s; this module exports them too.

A :class:`Rollout` is one agent's view of one episode. Its timeline mixes two kinds of step:

* :class:`AgentStep` — one model call (including calls inside an internal tool loop);
* :class:`EnvironmentStep` — one env transition, listing the agent steps of the turn that produced it.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal, TypeAlias, get_args

import attrs

from ludic_core.data_fields import slot_setters, to_tuple
from ludic_core.errors import DataError
from ludic_core.ids import new_id, seeded_ids  # re-exported: steps and rollouts take their ids from it
from ludic_core.messages import (
    FrozenMessage,
    Message,
    ToolCall,
    ToolResult,
    freeze_message,
    freeze_messages,
    to_tool_calls,
    to_tool_results,
)
from ludic_core.traces import ChatResponse, TokenTrace

__all__ = [
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

Info: TypeAlias = dict[str, Any]
"""Free-form, JSON-serialisable metadata. Never holds token lists (they live in traces)."""

ActionTarget: TypeAlias = Literal["internal", "external", "env"]
"""Where a model call's output goes: an internal tool loop, an external tool handler, or the env."""

TruncationReason: TypeAlias = Literal["env", "max_steps", "max_seq_len"]

ACTION_TARGETS: frozenset[str] = frozenset(get_args(ActionTarget))
TRUNCATION_REASONS: frozenset[str] = frozenset(get_args(TruncationReason))


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
    tool_calls: tuple[ToolCall, ...] | None = attrs.field(default=None, converter=to_tool_calls)
    tool_results: tuple[ToolResult, ...] | None = attrs.field(default=None, converter=to_tool_results)
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
        # The slots' own setters, in field order: a third cheaper than object.__setattr__ (slot_setters).
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
    agent_step_ids: tuple[str, ...] = attrs.field(converter=to_tuple)
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
        # The slots' own setters, in field order: a third cheaper than object.__setattr__ (slot_setters).
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
_AGENT_STEP_SLOTS = slot_setters(AgentStep)
_ENVIRONMENT_STEP_SLOTS = slot_setters(EnvironmentStep)
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

    @property
    def agent_steps(self) -> list[AgentStep]:
        return [s for s in self.steps if isinstance(s, AgentStep)]

    @property
    def env_steps(self) -> list[EnvironmentStep]:
        return [s for s in self.steps if isinstance(s, EnvironmentStep)]

    @property
    def truncated(self) -> bool:
        return bool(self.meta.get("episode_truncated", False))

    @property
    def truncation_reason(self) -> str | None:
        reason = self.meta.get("truncation_reason")
        return None if reason is None else str(reason)
