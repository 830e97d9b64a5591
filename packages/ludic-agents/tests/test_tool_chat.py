"""The registered agent ``"tool_chat"``: a ToolAgent a run config builds by name, its tools named in
the tool registry and its chat template by name, every bad option refused with the field and value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ludic_agents import ToolAgent, xml_tag_parser
from ludic_agents.chat_template import CHATML_TOOLS
from ludic_agents.testing import ScriptedTokenClient
from ludic_core.errors import ConfigError
from ludic_core.harness import ActOptions
from ludic_core.registry import make_agent

ANSWER = xml_tag_parser("answer")
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'


def _agent(tok: Any, script: list[str], **options: Any) -> tuple[Any, ScriptedTokenClient]:
    client = ScriptedTokenClient(tok, script)
    agent = make_agent("tool_chat", client=client, parser=ANSWER, system_prompt="Use the tools.", **options)
    agent.reset()
    agent.on_env_reset("What is 6 * 7?", {})
    return agent, client


async def test_it_calls_a_registered_tool_and_answers_in_one_turn(real_tok: Any) -> None:
    agent, client = _agent(
        real_tok, [CALL, "<answer>42</answer>"], tools=["calculator"], chat_template="chatml_tools"
    )
    assert isinstance(agent, ToolAgent) and agent.max_calls_per_turn == 8
    steps = (await agent.act(ActOptions(sampling_seed=1))).steps
    assert [s.action_target for s in steps] == ["internal", "env"]
    assert steps[0].tool_results is not None and steps[0].tool_results[0].content == "42"
    assert steps[1].parse_result is not None and steps[1].parse_result.action == "42"
    # The named template lists the tool's schema in the system message.
    prompt = real_tok.decode(client.requests[0].prompt_token_ids)
    schema = json.dumps(agent.tool_schemas[0]["function"])
    assert prompt.startswith("<|im_start|>system\nUse the tools.\n\nTools:\n") and schema in prompt


async def test_its_options_reach_the_tool_agent(real_tok: Any) -> None:
    agent, _ = _agent(real_tok, [CALL], tools=["calculator"], max_calls_per_turn=1)
    assert agent.max_calls_per_turn == 1
    (step,) = (await agent.act(ActOptions(sampling_seed=1))).steps
    assert step.action_target == "env"  # the last allowed call is read as the answer


def test_the_named_template_is_chatml_with_the_tools(real_tok: Any) -> None:
    agent, _ = _agent(real_tok, ["x"], tools=["calculator"], chat_template="chatml_tools")
    assert agent.chat_template.chat_template == CHATML_TOOLS


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tools": ["calculater"]}, "tool = 'calculater': not a registered tool; did you mean 'calculator'?"),
        ({"tools": "calculator"}, "tool_chat agent: tools must list registered tool names, got 'calculator'"),
        ({"tools": []}, "tool_chat agent: tools must list registered tool names, got []"),
        (
            {"tools": ["calculator"], "chat_template": "chatml"},
            "chat_template = 'chatml': not a named chat template; named: chatml_tools",
        ),
        ({"tools": ["calculator"], "tool_parser": "hermess"}, "hermess"),
    ],
)
def test_bad_options_are_refused_by_name(real_tok: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _agent(real_tok, ["x"], **options)
    assert message in str(raised.value)
