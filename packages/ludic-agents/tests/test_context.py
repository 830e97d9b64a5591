from __future__ import annotations

from typing import Any

import pytest

from ludic_agents import FullDialog, LatestObservation, TruncatedThinkingContext
from ludic_agents.context import NAMED_CONTEXTS, named_context
from ludic_core.errors import ConfigError
from ludic_core.types import ToolResult


def test_full_dialog_history_and_system_prompt() -> None:
    ctx = FullDialog(system_prompt="default")
    ctx.reset()
    ctx.on_env_reset("obs0", {})
    ctx.add_assistant({"role": "assistant", "content": "a0"})
    ctx.add_tool_results([ToolResult("call_1", "add", "3")])
    ctx.on_after_step("obs1", {})
    assert [m["role"] for m in ctx.prompt_messages()] == ["system", "user", "assistant", "tool", "user"]
    assert ctx.prompt_messages()[0]["content"] == "default"
    ctx.reset(system_prompt="override")
    assert ctx.messages == [{"role": "system", "content": "override"}]
    assert FullDialog().messages == []


def test_prompt_messages_are_copies() -> None:
    ctx = FullDialog()
    ctx.on_env_reset("x", {})
    ctx.prompt_messages()[0]["content"] = "changed"
    assert ctx.messages[0]["content"] == "x"


def test_truncated_thinking_only_rewrites_strict_form_in_prompt() -> None:
    ctx = TruncatedThinkingContext(placeholder="[T]")
    ctx.on_env_reset("<think>user think</think> kept", {})
    contents = [
        "  <think>long reasoning</think> A1",
        "<think>only thinking</think>",
        "prefix <think>x</think> B2",
        "<think>broken</thin> C3",
        "<THINK>caps</THINK>\nD4",
    ]
    for c in contents:
        ctx.add_assistant({"role": "assistant", "content": c})
    shown = [m["content"] for m in ctx.prompt_messages()]
    assert shown == [
        "<think>user think</think> kept",
        "  <think>[T]</think> A1",
        "<think>only thinking</think>",
        "prefix <think>x</think> B2",
        "<think>broken</thin> C3",
        "<THINK>[T]</THINK>\nD4",
    ]
    assert ctx.messages[1]["content"] == contents[0]  # history is intact


def test_bad_messages_are_rejected() -> None:
    ctx = FullDialog()
    with pytest.raises(ConfigError, match="role 'assistant'"):
        ctx.add_assistant({"role": "user", "content": "x"})
    with pytest.raises(ConfigError, match="role must be one of"):
        ctx.add_message({"role": "robot", "content": "x"})
    with pytest.raises(ConfigError, match="str content"):
        ctx.add_user(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["full_dialog", "latest_observation", "truncated_thinking"])
def test_a_named_context_is_a_fresh_strategy_of_that_name(name: str) -> None:
    ctx = named_context(name, system_prompt="rules")
    assert type(ctx) is NAMED_CONTEXTS[name] and ctx.messages == [{"role": "system", "content": "rules"}]
    assert named_context(name) is not named_context(name)


@pytest.mark.parametrize("name", ["latest", None, 3])
def test_an_unknown_context_name_is_refused_with_the_known_ones(name: object) -> None:
    with pytest.raises(ConfigError, match=r"context must be one of \['full_dialog', .*got " + repr(name)):
        named_context(name)  # type: ignore[arg-type]


def test_the_chat_agent_shows_only_the_latest_board_with_latest_observation(real_tok: Any) -> None:
    from ludic_agents.testing import ScriptedTokenClient
    from ludic_core.registry import make_agent

    client = ScriptedTokenClient(real_tok, ["a"])
    agent = make_agent("chat", client=client, parser=lambda t: t, context="latest_observation")
    assert isinstance(agent.context, LatestObservation)
    agent.reset()
    agent.on_env_reset("board 1", {})
    agent.context.add_assistant({"role": "assistant", "content": "a"})
    agent.on_after_step("board 2", {})
    assert [m["content"] for m in agent.context.prompt_messages()] == ["board 2"]
    assert isinstance(make_agent("chat", client=client, parser=lambda t: t).context, FullDialog)
