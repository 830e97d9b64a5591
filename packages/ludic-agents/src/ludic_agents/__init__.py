"""ludic-agents: LLM harnesses for Ludic.

* :class:`Agent`, :class:`ToolAgent`, :class:`ReActAgent` — implementations of
  :class:`ludic_core.harness.AgentHarness` whose prompts extend token for token within a turn;
* context strategies :class:`FullDialog`, :class:`LatestObservation`, :class:`TruncatedThinkingContext` (and the
  :class:`ContextStrategy` base for your own);
* parsers with intrinsic format rewards (:mod:`ludic_agents.parsers`);
* chat templates (:class:`HFChatTemplate`) and tool-call parsers (``"hermes"``, ``"qwen3_coder"``);
* tools with schemas from type hints and docstrings (:class:`Tool`, :func:`tool`).

``transformers`` is never imported here; :mod:`ludic_agents.testing` (offline real tokenizers) needs
the ``[hf]`` extra.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost more than the rest of this module.
# Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_agents.agent import DEFAULT_INCOMPLETE_FEEDBACK, Agent
    from ludic_agents.chat_template import (
        ChatTemplate,
        HFChatTemplate,
        RenderedPrompt,
        normalize_messages,
        renders_tool_calls,
    )
    from ludic_agents.context import ContextStrategy, FullDialog, LatestObservation, TruncatedThinkingContext
    from ludic_agents.extension import TurnPrompt, assistant_closing, divergence_report
    from ludic_agents.parsers import (
        boxed_parser,
        compose_parsers,
        cot_prefix_parser,
        extract_last_boxed_content,
        think_prefix_parser,
        xml_parser,
        xml_tag_parser,
    )
    from ludic_agents.tool_agent import DEFAULT_FINAL_ANSWER_PROMPT, ReActAgent, ToolAgent
    from ludic_agents.tool_parsers import (
        HermesToolParser,
        Qwen3CoderToolParser,
        ToolCallParser,
        ToolParseResult,
        get_tool_parser,
        tool_parser_names,
    )
    from ludic_agents.tools import Tool, run_tool_call, tool, type_to_schema

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
