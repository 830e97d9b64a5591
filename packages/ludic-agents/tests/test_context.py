from __future__ import annotations

import pytest

from ludic_agents import FullDialog, TruncatedThinkingContext
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
