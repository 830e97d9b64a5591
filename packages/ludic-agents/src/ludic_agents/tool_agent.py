"""``ToolAgent`` and ``ReActAgent``: agents that call tools inside their turn.

One ``act`` is a loop of model calls; after each, the chat template's tool parser reads the completion.
No tool calls: the output goes to the env (``action_target="env"``). Internal calls: the agent runs them
and calls the model again (``"internal"``). Any external call: internal calls of the completion run
first, the external ones go to the protocol (``"external"``) and the turn continues after
:meth:`on_tool_results`. An unreadable tool-call block is an env-targeted parse failure
(``tool_parse_error_penalty``, ``info["tool_parse_error"]``). Tool errors and timeouts become tool
messages the model sees. The last allowed call (``max_calls_per_turn``; ``ReActAgent``:
``max_react_steps`` per ``act``) is env-targeted, and ``ReActAgent`` adds a prompt-only final-answer
instruction to it. All calls of a turn share one token sequence (:mod:`ludic_agents.extension`), so tool
schemas stay in the prompt for the whole turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from ludic_agents.agent import Agent
from ludic_agents.chat_template import ChatTemplate, HFChatTemplate, named_chat_template, renders_tool_calls
from ludic_agents.context import named_context
from ludic_agents.tools import Tool, registered_tool, run_tool_call
from ludic_core.errors import ConfigError
from ludic_core.harness import DEFAULT_ACT_OPTIONS, ActOptions, AgentActResult, AgentActStep
from ludic_core.inference import ChatClient
from ludic_core.parsing import Parser, ParseResult
from ludic_core.types import Info, Message, ToolCall, ToolResult
from ludic_core.validation import check_int, check_number

__all__ = ["DEFAULT_FINAL_ANSWER_PROMPT", "ReActAgent", "ToolAgent", "ToolSpec", "make_tool_chat_agent"]

ToolSpec = Tool | Callable[..., Any]
DEFAULT_FINAL_ANSWER_PROMPT = (
    "You have exhausted your reasoning steps. You must output your final answer now."
)


def _as_tool(spec: ToolSpec) -> Tool:
    return spec if isinstance(spec, Tool) else Tool.from_function(spec)


def _as_external_schema(spec: Tool | Callable[..., Any] | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, Mapping):
        fn = spec.get("function", spec)
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ConfigError(f"an external tool schema needs function.name, got {dict(spec)!r}")
        schema = dict(spec) if "function" in spec else {"type": "function", "function": dict(spec)}
        return name, schema
    t = _as_tool(spec)
    return t.name, t.schema()


class ToolAgent(Agent):
    """An agent with internal tools (run here) and external tools (run by the protocol).

    ``max_calls_per_turn`` bounds the model calls of one turn, external tool round trips included;
    ``tool_timeout_s`` bounds each tool call whose :class:`Tool` sets no ``timeout_s`` of its own.
    """

    budget_per_act: ClassVar[bool] = False
    """Whether the call budget restarts at every ``act`` (after each external round trip) instead of
    covering the whole turn."""

    def __init__(
        self,
        *,
        tools: Sequence[ToolSpec] = (),
        external_tools: Sequence[Tool | Callable[..., Any] | Mapping[str, Any]] = (),
        max_calls_per_turn: int = 8,
        tool_timeout_s: float | None = 30.0,
        tool_parse_error_penalty: float = -1.0,
        tool_parse_error_feedback: str = "Invalid tool call format.",
        **agent_kwargs: Any,
    ) -> None:
        super().__init__(**agent_kwargs)
        check_int("max_calls_per_turn", max_calls_per_turn, 1)
        check_number("tool_timeout_s", tool_timeout_s, minimum=0, exclusive=True, optional=True)
        check_number("tool_parse_error_penalty", tool_parse_error_penalty, optional=True)
        internal = [_as_tool(t) for t in tools]
        external = [_as_external_schema(t) for t in external_tools]
        names = [t.name for t in internal] + [n for n, _ in external]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(
                f"tool names must be unique across tools and external_tools; repeated: {duplicates}"
            )
        self.tools: dict[str, Tool] = {t.name: t for t in internal}
        self.external_tool_names: frozenset[str] = frozenset(n for n, _ in external)
        self.tool_schemas: list[dict[str, Any]] = [t.schema() for t in internal] + [s for _, s in external]
        if self.tool_schemas:
            if self.chat_template.tool_parser is None:
                raise ConfigError(
                    "tools were given but the chat template has no tool_parser (e.g. tool_parser='hermes')"
                )
            if not self.context.supports_tools:
                raise ConfigError(f"{type(self.context).__name__} does not support tools")
        self.max_calls_per_turn = max_calls_per_turn
        self.tool_timeout_s = tool_timeout_s
        self.tool_parse_error_penalty = float(tool_parse_error_penalty)
        self.tool_parse_error_feedback = tool_parse_error_feedback
        self._call_counter = 0

    def is_external_tool(self, name: str) -> bool:
        return name in self.external_tool_names

    def final_call_messages(self) -> list[Message]:
        """Prompt-only messages added before the turn's last allowed call (none for ToolAgent)."""
        return []

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        steps: list[AgentActStep] = []
        schemas = self.tool_schemas or None
        # loop_index numbers the calls of the whole turn (seeds, traces); the budget counts from here
        # when it is per act (ReActAgent), from the turn's first call otherwise.
        budget_start = self._turn_calls if self.budget_per_act else 0
        while True:
            loop_index = self._turn_calls
            last = loop_index - budget_start >= self.max_calls_per_turn - 1
            extra = self.final_call_messages() if last else []
            prompt_ids, prompt_messages, render_info = self._next_prompt(tools=schemas, extra=extra)
            response = await self._complete(prompt_ids, options, loop_index)
            text = self.completion_text(response)
            info: Info = {**self._call_info(response), **render_info}
            if extra:
                info["final_call_prompt"] = True

            incomplete = self.reject_incomplete_completions and response.finish_reason == "length"
            tool_parser = self.chat_template.tool_parser
            parsed = tool_parser.parse(text, tools=schemas) if schemas and tool_parser is not None else None
            if last or incomplete or parsed is None or (not parsed.tool_calls and not parsed.errors):
                result, parse_info = self.parse_env_output(text, response.finish_reason)
                if last and parsed is not None and parsed.tool_calls:
                    parse_info["unexecuted_tool_calls"] = [c.name for c in parsed.tool_calls]
                steps.append(
                    self._env_step(
                        response, text, prompt_messages, loop_index, result, {**info, **parse_info}
                    )
                )
                return AgentActResult(steps=steps)
            if parsed.errors:
                failure = ParseResult(None, self.tool_parse_error_penalty, self.tool_parse_error_feedback)
                failure_info = {**info, "tool_parse_error": True, "tool_parse_errors": list(parsed.errors)}
                steps.append(
                    self._env_step(response, text, prompt_messages, loop_index, failure, failure_info)
                )
                return AgentActResult(steps=steps)

            calls = self._fresh_ids(parsed.tool_calls)
            # Tool-aware templates re-render the calls from the structured field; others would drop
            # them from the history unless the content keeps the text the model wrote.
            content = parsed.content if renders_tool_calls(self.chat_template) else text
            self._commit_completion(
                response,
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [c.to_openai() for c in calls],
                },
            )
            internal = [c for c in calls if not self.is_external_tool(c.name)]
            external = [c for c in calls if self.is_external_tool(c.name)]
            results, succeeded = await self._run_internal(internal)
            self.context.add_tool_results(results)
            self._pending.extend(r.to_message() for r in results)
            tool_info = {**info, "tool_errors": sum(1 for ok in succeeded if not ok)}
            if external:
                self._awaiting_external = {c.id for c in external}
                tool_info["internal_tool_calls"] = [c.to_dict() for c in internal]
            steps.append(
                AgentActStep(
                    trace=response.to_trace(),
                    prompt_messages=prompt_messages,
                    action=text,
                    action_target="external" if external else "internal",
                    loop_index=loop_index,
                    tool_calls=external or calls,
                    tool_results=results,
                    info=tool_info,
                )
            )
            if external:
                return AgentActResult(steps=steps)

    def _fresh_ids(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        # Parsers number calls per completion; ids must be unique over the episode so that results
        # (and external handlers) can never be matched to the wrong call.
        out = []
        for call in calls:
            self._call_counter += 1
            out.append(attrs.evolve(call, id=f"call_{self._call_counter}"))
        return out

    async def _run_internal(self, calls: Sequence[ToolCall]) -> tuple[list[ToolResult], list[bool]]:
        # Sequential on purpose: tools may have side effects whose order the model relies on.
        results: list[ToolResult] = []
        succeeded: list[bool] = []
        for call in calls:
            result, ok = await run_tool_call(call, self.tools, default_timeout_s=self.tool_timeout_s)
            results.append(result)
            succeeded.append(ok)
        return results, succeeded

    def reset(self, *, system_prompt: str | None = None) -> None:
        super().reset(system_prompt=system_prompt)
        self._call_counter = 0


class ReActAgent(ToolAgent):
    """Think/act loop: at most ``max_react_steps`` model calls per ``act``, the last one prompted with
    ``final_answer_prompt`` (a prompt-only user message) and parsed as the env answer.

    The count restarts at every ``act`` call, as in the original Ludic: when the agent hands external
    tool calls to the protocol, the ``act`` that continues the turn after :meth:`on_tool_results` gets
    ``max_react_steps`` calls of its own, so the model can still reason over the external results
    instead of being forced to answer because of calls it made before asking for them. ``loop_index``
    still numbers every call of the turn (seeds stay distinct); the protocol's ``max_external_rounds``
    bounds the round trips.
    """

    budget_per_act: ClassVar[bool] = True

    def __init__(
        self,
        *,
        max_react_steps: int = 5,
        final_answer_prompt: str = DEFAULT_FINAL_ANSWER_PROMPT,
        **kwargs: Any,
    ) -> None:
        if "max_calls_per_turn" in kwargs:
            raise ConfigError("ReActAgent takes max_react_steps, not max_calls_per_turn")
        if not isinstance(final_answer_prompt, str) or not final_answer_prompt:
            raise ConfigError(f"final_answer_prompt must be a non-empty str, got {final_answer_prompt!r}")
        super().__init__(max_calls_per_turn=max_react_steps, **kwargs)
        self.final_answer_prompt = final_answer_prompt

    @property
    def max_react_steps(self) -> int:
        return self.max_calls_per_turn

    def final_call_messages(self) -> list[Message]:
        return [{"role": "user", "content": self.final_answer_prompt}]


def make_tool_chat_agent(
    *,
    client: ChatClient,
    parser: Parser,
    tools: Sequence[str],
    system_prompt: str | None = None,
    tool_parser: str = "hermes",
    chat_template: str | ChatTemplate | None = None,
    context: str = "full_dialog",
    **options: Any,
) -> ToolAgent:
    """A :class:`ToolAgent` offering the registered tools named in ``tools`` (:data:`~ludic_agents.tools.TOOLS`),
    with a fresh context whose system prompt is ``system_prompt`` (None: the env's suggestion) and
    whose strategy ``context`` names (as :func:`~ludic_agents.agent.make_chat_agent`'s); ``tool_parser`` reads the calls (``"hermes"``: ``<tool_call>{...}</tool_call>``).

    ``chat_template``: a template named in :data:`~ludic_agents.chat_template.NAMED_CHAT_TEMPLATES`
    (``"chatml_tools"`` for a ChatML model whose own template has no tool section), a
    :class:`ChatTemplate`, or None for the client tokenizer's own. ``options`` are the other
    :class:`ToolAgent` arguments (``max_calls_per_turn``, ``reject_incomplete_completions``, ...).

    Registered as the agent ``"tool_chat"``, so a run config builds it by name with JSON options
    (``agent = "tool_chat"``, ``agent_kwargs = {tools = ["calculator"]}``)."""
    if isinstance(tools, str) or not isinstance(tools, Sequence) or not tools:
        raise ConfigError(f"tool_chat agent: tools must list registered tool names, got {tools!r}")
    template = chat_template
    if template is None or isinstance(template, str):
        tokenizer = getattr(client, "tokenizer", None)
        if tokenizer is None:
            raise ConfigError(
                "tool_chat agent: the client has no tokenizer to render prompts with; pass a ChatTemplate"
            )
        source = None if template is None else named_chat_template(template)
        template = HFChatTemplate(tokenizer, tool_parser=tool_parser, chat_template=source)
    return ToolAgent(
        client=client,
        parser=parser,
        chat_template=template,
        context=named_context(context, system_prompt),
        tools=[registered_tool(name) for name in tools],
        **options,
    )
