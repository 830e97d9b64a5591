"""The agent contract that interaction protocols rely on.

An agent owns everything between the env and the model: context, chat template, parser, tools and
format rewards. One :meth:`AgentHarness.act` call is one *turn attempt*: it may make several model
calls (an internal tool loop) and returns all of them, each with its :class:`~ludic_core.traces.TokenTrace`.
The last call's ``action_target`` tells the protocol what to do next:

* ``"env"`` — ``parse_result`` says whether there is an env action (or a failure with feedback);
* ``"external"`` — ``tool_calls`` must be run by the protocol's external tool handler, whose results
  go back through :meth:`AgentHarness.on_tool_results` before the next ``act``;
* ``"internal"`` — the agent ended its attempt inside its own tool loop (e.g. a step budget); the
  protocol counts the attempt and asks again.

``ludic_agents.Agent`` is the full implementation; ``ludic_core.testing.ScriptedAgent`` a minimal one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import attrs

from ludic_core.data_fields import slot_setters
from ludic_core.errors import DataError
from ludic_core.inference import InferenceSpec
from ludic_core.messages import Message, ToolCall, ToolResult, freeze_messages, to_tool_calls, to_tool_results
from ludic_core.parsing import ParseResult
from ludic_core.traces import TokenTrace
from ludic_core.types import ActionTarget, Info, _check_action_target

__all__ = [
    "DEFAULT_ACT_OPTIONS",
    "ActOptions",
    "AgentActResult",
    "AgentActStep",
    "AgentHarness",
    "ExternalToolHandler",
]


@attrs.frozen
class ActOptions:
    """How one :meth:`AgentHarness.act` makes its model calls: every call samples with ``inference``
    (None: the agent's own spec), ``sampling_seed`` seeds them (None: unseeded) and ``timeout_s``
    bounds each one."""

    inference: InferenceSpec | None = None
    sampling_seed: int | None = None
    timeout_s: float | None = None

    @classmethod
    def _of(
        cls, inference: InferenceSpec | None, sampling_seed: int | None, timeout_s: float | None
    ) -> ActOptions:
        """The options of one model call, built field by field through the slots' setters: the same
        value as ``__init__`` builds (the fields have no converters or checks) for less than half the
        work, once per call. Private to the protocols."""
        options = object.__new__(cls)
        set_inference, set_sampling_seed, set_timeout_s = _ACT_OPTIONS_SLOTS
        set_inference(options, inference)
        set_sampling_seed(options, sampling_seed)
        set_timeout_s(options, timeout_s)
        return options


_ACT_OPTIONS_SLOTS = slot_setters(ActOptions)
DEFAULT_ACT_OPTIONS = ActOptions()


@attrs.frozen
class AgentActStep:
    """One model call made during :meth:`AgentHarness.act`.

    ``parse_result`` is required for ``"env"`` steps. Agents report incomplete completions
    (``finish_reason == "length"``) as parse failures themselves, with ``info["incomplete_completion"]``.
    """

    trace: TokenTrace
    prompt_messages: tuple[Message, ...] = attrs.field(converter=freeze_messages)
    action: str
    action_target: ActionTarget = attrs.field(validator=_check_action_target)
    parse_result: ParseResult | None = None
    loop_index: int = 0
    tool_calls: tuple[ToolCall, ...] | None = attrs.field(default=None, converter=to_tool_calls)
    tool_results: tuple[ToolResult, ...] | None = attrs.field(default=None, converter=to_tool_results)
    info: Info = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.action_target == "env" and self.parse_result is None:
            raise DataError("an AgentActStep with action_target='env' needs a parse_result")
        if self.action_target == "external" and not self.tool_calls:
            raise DataError("an AgentActStep with action_target='external' needs tool_calls")

    @property
    def parse_error(self) -> bool:
        return (
            self.action_target == "env" and self.parse_result is not None and self.parse_result.action is None
        )

    @classmethod
    def _trusted(
        cls,
        trace: TokenTrace,
        prompt_messages: tuple[Message, ...],
        action: str,
        action_target: ActionTarget,
        parse_result: ParseResult | None,
        loop_index: int = 0,
        tool_calls: tuple[ToolCall, ...] | None = None,
        tool_results: tuple[ToolResult, ...] | None = None,
        info: Info | None = None,
    ) -> AgentActStep:
        """Build from values an agent harness made itself: a trace from a checked
        :class:`~ludic_core.traces.ChatResponse`, its prompt as a tuple of
        :class:`~ludic_core.messages.FrozenMessage`, an action target it wrote as a literal, tool calls and
        results already as tuples of their types. The converters of ``__init__`` would only copy them
        again. The two rules between fields are still checked (a
        parser may return ``None``). Private to Ludic's agents: anything else goes through ``__init__``."""
        if action_target == "env" and parse_result is None:
            raise DataError("an AgentActStep with action_target='env' needs a parse_result")
        if action_target == "external" and not tool_calls:
            raise DataError("an AgentActStep with action_target='external' needs tool_calls")
        step = object.__new__(cls)
        # The slots' own setters, in field order (see ludic_core.data_fields.slot_setters).
        (
            set_trace,
            set_prompt_messages,
            set_action,
            set_action_target,
            set_parse_result,
            set_loop_index,
            set_tool_calls,
            set_tool_results,
            set_info,
        ) = _ACT_STEP_SLOTS
        set_trace(step, trace)
        set_prompt_messages(step, prompt_messages)
        set_action(step, action)
        set_action_target(step, action_target)
        set_parse_result(step, parse_result)
        set_loop_index(step, loop_index)
        set_tool_calls(step, tool_calls)
        set_tool_results(step, tool_results)
        set_info(step, {} if info is None else info)
        return step


_ACT_STEP_SLOTS = slot_setters(AgentActStep)


def _to_steps(steps: Iterable[AgentActStep]) -> tuple[AgentActStep, ...]:
    return tuple(steps)


@attrs.frozen
class AgentActResult:
    """Every model call of one ``act``, in order; the last one decides what happens next."""

    steps: tuple[AgentActStep, ...] = attrs.field(converter=_to_steps)

    def __attrs_post_init__(self) -> None:
        if not self.steps:
            raise DataError("AgentActResult needs at least one step (every act makes a model call)")

    @property
    def final_step(self) -> AgentActStep:
        return self.steps[-1]

    @classmethod
    def _one(cls, step: AgentActStep) -> AgentActResult:
        """The result of an ``act`` that made one model call (most do); private to Ludic's agents."""
        result = object.__new__(cls)
        _set_result_steps(result, (step,))
        return result


(_set_result_steps,) = slot_setters(AgentActResult)


@runtime_checkable
class AgentHarness(Protocol):
    """What a protocol needs from an agent. One agent instance serves one episode at a time."""

    @property
    def default_system_prompt(self) -> str | None:
        """The agent's own system prompt; it wins over the env's suggestion."""
        ...

    def reset(self, *, system_prompt: str | None = None) -> None:
        """Start a new episode with this system prompt (None: no system message)."""
        ...

    def on_env_reset(self, obs: str, info: Info) -> None: ...

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        """One decision, its model calls made as ``options`` says; each trace carries the temperature
        its client reported sampling at."""
        ...

    def on_after_step(self, obs: str, info: Info) -> None:
        """Feed the next observation (an env obs or the synthetic feedback after a parse failure)."""
        ...

    def on_tool_results(self, results: Sequence[ToolResult]) -> None:
        """Feed the results of external tool calls before the next ``act``."""
        ...


ExternalToolHandler: TypeAlias = Callable[
    [Sequence[ToolCall]], "Sequence[ToolResult] | Awaitable[Sequence[ToolResult]]"
]
"""Runs external tool calls for the protocol (sync or async). Must return one result per call."""
