"""Agent, ToolAgent and ReActAgent rules, driven by a scripted client over the real Qwen2.5 tokenizer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ludic_agents import (
    DEFAULT_INCOMPLETE_FEEDBACK,
    Agent,
    HFChatTemplate,
    ReActAgent,
    ToolAgent,
    TruncatedThinkingContext,
    xml_tag_parser,
)
from ludic_agents.testing import ScriptedCompletion, ScriptedTokenClient
from ludic_core.errors import ConfigError, LudicTimeoutError, ProtocolError
from ludic_core.harness import ActOptions, AgentHarness
from ludic_core.inference import InferenceSpec, SamplingParams
from ludic_core.parsing import ParseResult
from ludic_core.seeding import derive_seed
from ludic_core.testing import ScriptedChatClient
from ludic_core.types import ToolResult

ANSWER = xml_tag_parser("answer")


def _call(name: str, args: str = "{}") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def double(x: int) -> int:
    """Double a number."""
    return 2 * x


def make(cls: type[Agent], tok: Any, script: Any, **kwargs: Any) -> tuple[Any, ScriptedTokenClient]:
    client = ScriptedTokenClient(tok, script, latency_s=kwargs.pop("latency_s", 0.0))
    kwargs.setdefault("parser", ANSWER)
    kwargs.setdefault("chat_template", HFChatTemplate(tok, tool_parser="hermes"))
    agent = cls(client=client, **kwargs)
    agent.reset(system_prompt=kwargs.get("system_prompt"))
    agent.on_env_reset("start", {})
    return agent, client


async def test_agent_single_call_parses_and_traces(qwen_tok: Any) -> None:
    agent, client = make(Agent, qwen_tok, ["<answer>A1</answer>"])
    assert isinstance(agent, AgentHarness)
    result = await agent.act(ActOptions(sampling_seed=11))
    (step,) = result.steps
    assert step.action_target == "env" and step.parse_result == ParseResult("A1", 0.1, None)
    assert step.action == "<answer>A1</answer>"  # EOS dropped from the text, kept in the trace
    assert step.trace.completion_token_ids[-1] == qwen_tok.eos_token_id
    assert step.trace.prompt_token_ids == client.requests[0].prompt_token_ids
    assert client.requests[0].seed == derive_seed(11, 0)
    assert step.prompt_messages[-1] == {"role": "user", "content": "start"}
    assert agent.context.messages[-1] == {"role": "assistant", "content": "<answer>A1</answer>"}


async def test_seed_none_stays_none(qwen_tok: Any) -> None:
    agent, client = make(Agent, qwen_tok, ["<answer>x</answer>"])
    await agent.act()
    assert client.requests[0].seed is None


async def test_incomplete_completion_is_a_parse_failure_by_default(qwen_tok: Any) -> None:
    long = "<answer>" + "word " * 50 + "</answer>"
    spec = InferenceSpec(sampling=SamplingParams(max_tokens=8))
    agent, _ = make(Agent, qwen_tok, [long], inference=spec)
    (step,) = (await agent.act()).steps
    assert step.trace.finish_reason == "length" and len(step.trace.completion_token_ids) == 8
    assert step.parse_result == ParseResult(None, -0.1, DEFAULT_INCOMPLETE_FEEDBACK)
    assert step.info["incomplete_completion"] is True and step.parse_error

    custom, _ = make(
        Agent,
        qwen_tok,
        [long],
        inference=spec,
        incomplete_completion_penalty=-0.7,
        incomplete_completion_feedback="shorter!",
    )
    (step,) = (await custom.act()).steps
    assert step.parse_result == ParseResult(None, -0.7, "shorter!")

    lenient, _ = make(
        Agent,
        qwen_tok,
        ["<answer>ok</answer> trailing words here"],
        inference=spec,
        reject_incomplete_completions=False,
    )
    (step,) = (await lenient.act()).steps
    assert step.trace.finish_reason == "length" and step.parse_result is not None
    assert "incomplete_completion" not in step.info


async def test_call_timeout(qwen_tok: Any) -> None:
    agent, _ = make(Agent, qwen_tok, ["<answer>x</answer>"], latency_s=2.0, call_timeout_s=0.05)
    with pytest.raises(LudicTimeoutError, match=r"timeout_s=0\.05"):
        await agent.act()
    agent2, _ = make(Agent, qwen_tok, ["<answer>x</answer>"], latency_s=2.0)
    with pytest.raises(LudicTimeoutError):
        await agent2.act(ActOptions(timeout_s=0.05))


async def test_turns_start_fresh_after_each_observation(qwen_tok: Any) -> None:
    agent, client = make(
        Agent,
        qwen_tok,
        ["<think>long</think> <answer>1</answer>", "<answer>2</answer>"],
        context=TruncatedThinkingContext(),
    )
    await agent.act()
    agent.on_after_step("next", {})
    (step,) = (await agent.act()).steps
    assert step.info["prompt_render"] == "fresh"
    text = qwen_tok.decode(client.requests[1].prompt_token_ids)
    assert "<think>[TRUNCATED]</think> <answer>1</answer>" in text and "long" not in text


def test_config_errors(qwen_tok: Any) -> None:
    with pytest.raises(ConfigError, match="chat_template"):
        Agent(client=ScriptedChatClient(["x"]), parser=ANSWER)  # no tokenizer to build a template from
    client = ScriptedTokenClient(qwen_tok, ["x"])
    template = HFChatTemplate(qwen_tok, tool_parser="hermes")
    with pytest.raises(ConfigError, match="parser must be callable"):
        Agent(client=client, parser="nope", chat_template=template)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="call_timeout_s"):
        Agent(client=client, parser=ANSWER, chat_template=template, call_timeout_s=0)
    with pytest.raises(ConfigError, match="no tool_parser"):
        ToolAgent(client=client, parser=ANSWER, chat_template=HFChatTemplate(qwen_tok), tools=[double])
    with pytest.raises(ConfigError, match="repeated"):
        ToolAgent(
            client=client, parser=ANSWER, chat_template=template, tools=[double], external_tools=[double]
        )
    with pytest.raises(ConfigError, match="template_kwargs"):
        HFChatTemplate(qwen_tok, template_kwargs={"tools": []})


def test_default_template_from_client_tokenizer(qwen_tok: Any) -> None:
    client = ScriptedTokenClient(qwen_tok, ["x"])
    agent = Agent(client=client, parser=ANSWER)  # ScriptedTokenClient exposes .tokenizer
    assert isinstance(agent.chat_template, HFChatTemplate)


def test_hf_template_passes_tools_and_kwargs(qwen_tok: Any) -> None:
    marker = "{% if enable_thinking is defined and not enable_thinking %}NO-THINK{% endif %}"
    template = HFChatTemplate(
        qwen_tok,
        template_kwargs={"enable_thinking": False},
        chat_template=marker + "{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}",
    )
    schema = {"type": "function", "function": {"name": "double", "parameters": {}}}
    assert template.render_text([{"role": "user", "content": "x"}], tools=[schema]) == "NO-THINK[double]"
    real = HFChatTemplate(qwen_tok)
    msgs = [{"role": "user", "content": "hi"}]
    assert real.render(msgs).token_ids == tuple(
        qwen_tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False)
    )


async def test_tool_agent_internal_loop_then_answer(qwen_tok: Any) -> None:
    agent, client = make(
        ToolAgent, qwen_tok, [_call("double", '{"x": 21}'), "<answer>42</answer>"], tools=[double]
    )
    steps = (await agent.act(ActOptions(sampling_seed=1))).steps
    assert [s.action_target for s in steps] == ["internal", "env"]
    assert steps[0].parse_result is None and steps[0].tool_results is not None
    assert steps[0].tool_results[0].content == "42"
    assert [r.seed for r in client.requests] == [derive_seed(1, 0), derive_seed(1, 1)]
    assert "double" in qwen_tok.decode(client.requests[0].prompt_token_ids)  # schema in the system prompt
    roles = [m["role"] for m in agent.context.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert agent.context.messages[1]["tool_calls"][0]["function"]["name"] == "double"


async def test_external_tools_go_to_the_protocol_and_the_turn_continues(qwen_tok: Any) -> None:
    script = [_call("double", '{"x": 1}') + _call("web", '{"q": "x"}'), "<answer>done</answer>"]
    web_schema = {"type": "function", "function": {"name": "web", "description": "search", "parameters": {}}}
    agent, _ = make(ToolAgent, qwen_tok, script, tools=[double], external_tools=[web_schema])
    first = (await agent.act()).steps
    assert [s.action_target for s in first] == ["external"]
    ext = first[0]
    assert ext.tool_calls is not None and [c.name for c in ext.tool_calls] == ["web"]
    assert ext.tool_results is not None and ext.tool_results[0].content == "2"  # internal call already ran
    with pytest.raises(ProtocolError, match="on_tool_results"):
        await agent.act()
    with pytest.raises(ProtocolError, match="not awaited"):
        agent.on_tool_results([ToolResult("call_999", "web", "stray")])
    agent.on_tool_results([ToolResult(ext.tool_calls[0].id, "web", "result!")])
    second = (await agent.act()).steps
    assert second[0].action_target == "env" and second[0].loop_index == 1
    assert second[0].info["prompt_render"] == "extended"
    seq = ext.trace.prompt_token_ids + ext.trace.completion_token_ids
    assert second[0].trace.prompt_token_ids[: len(seq)] == seq
    assert "result!" in qwen_tok.decode(second[0].trace.prompt_token_ids[len(seq) :])
    with pytest.raises(ProtocolError, match="no turn"):
        agent.on_tool_results([])


async def test_tool_parse_error_ends_the_turn_with_penalty(qwen_tok: Any) -> None:
    agent, _ = make(
        ReActAgent, qwen_tok, ["<tool_call>{oops}</tool_call>"], tools=[double], tool_parse_error_penalty=-0.3
    )
    (step,) = (await agent.act()).steps
    assert step.action_target == "env" and step.parse_result == ParseResult(
        None, -0.3, "Invalid tool call format."
    )
    assert step.info["tool_parse_error"] is True and step.info["tool_parse_errors"]


async def test_react_budget_and_final_answer_prompt(qwen_tok: Any) -> None:
    script = [_call("double", '{"x": 1}'), _call("double", '{"x": 2}'), _call("double", '{"x": 3}')]
    agent, client = make(ReActAgent, qwen_tok, script, tools=[double], max_react_steps=3)
    steps = (await agent.act()).steps
    assert [s.action_target for s in steps] == ["internal", "internal", "env"]
    final = steps[-1]
    assert final.parse_result is not None and final.parse_result.action is None  # no <answer>
    assert final.info["unexecuted_tool_calls"] == ["double"]
    assert agent.final_answer_prompt in qwen_tok.decode(client.requests[-1].prompt_token_ids)
    assert agent.final_answer_prompt not in qwen_tok.decode(client.requests[-2].prompt_token_ids)
    with pytest.raises(ConfigError, match="max_react_steps"):
        ReActAgent(client=client, parser=ANSWER, chat_template=agent.chat_template, max_calls_per_turn=2)


@pytest.mark.parametrize("cls", [ReActAgent, ToolAgent])
async def test_react_budget_restarts_after_external_tools_tool_agent_budget_does_not(
    qwen_tok: Any, cls: type[ToolAgent]
) -> None:
    # Act 1: internal call, then an external one (calls 0, 1). Act 2 keeps calling the internal tool.
    web = {"type": "function", "function": {"name": "web", "description": "search", "parameters": {}}}
    script = [_call("double", '{"x": 1}'), _call("web"), *[_call("double", '{"x": 2}')] * 3]
    budget = {"max_react_steps": 3} if cls is ReActAgent else {"max_calls_per_turn": 3}
    agent, client = make(cls, qwen_tok, script, tools=[double], external_tools=[web], **budget)
    first = (await agent.act(ActOptions(sampling_seed=5))).steps
    assert [s.action_target for s in first] == ["internal", "external"]
    assert first[-1].tool_calls is not None
    agent.on_tool_results([ToolResult(first[-1].tool_calls[0].id, "web", "found")])
    second = (await agent.act(ActOptions(sampling_seed=5))).steps
    # The final-answer instruction marks the last allowed call.
    final_prompted = ["final_call_prompt" in s.info for s in second]
    if cls is ReActAgent:
        # A fresh budget of 3 calls for this act: two more tool rounds, then the forced answer.
        assert [s.action_target for s in second] == ["internal", "internal", "env"]
        assert [s.loop_index for s in second] == [2, 3, 4]  # still numbered over the whole turn
        assert final_prompted == [False, False, True]
        assert agent.final_answer_prompt in qwen_tok.decode(client.requests[-1].prompt_token_ids)
        assert [r.seed for r in client.requests] == [derive_seed(5, i) for i in range(5)]
    else:
        # ToolAgent's max_calls_per_turn covers the whole turn: its third call is the last one.
        assert [s.action_target for s in second] == ["env"] and second[0].loop_index == 2
        assert second[0].info["unexecuted_tool_calls"] == ["double"]


async def test_react_tool_errors_become_tool_messages_and_loop_continues(qwen_tok: Any) -> None:
    async def slow() -> str:
        """Never finishes in time."""
        await asyncio.sleep(5)
        return "late"

    def broken(x: int) -> int:
        """Always fails."""
        raise ValueError("bad x")

    script = [
        _call("missing") + _call("double", '"not an object"') + _call("broken", '{"x": 1}') + _call("slow"),
        "<answer>ok</answer>",
    ]
    agent, _ = make(ReActAgent, qwen_tok, script, tools=[double, broken, slow], tool_timeout_s=0.05)
    steps = (await agent.act()).steps
    assert [s.action_target for s in steps] == ["internal", "env"]
    contents = [r.content for r in steps[0].tool_results or ()]
    assert len(contents) == 4 and all(c.startswith("Error:") for c in contents)
    assert "not found" in contents[0] and "not valid JSON" in contents[1]
    assert "ValueError: bad x" in contents[2] and "timed out" in contents[3]
    assert steps[0].info["tool_errors"] == 4
    assert steps[-1].parse_result == ParseResult("ok", 0.1, None)


_pieces = st.sampled_from(
    [
        "<answer>",
        "</answer>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        '{"name": "double", "arguments": {"x": 2}}',
        '{"name": "nope"}',
        "{",
        "\n",
    ]
)
outputs = st.lists(
    st.lists(st.one_of(st.text(max_size=12), _pieces), max_size=10).map("".join), min_size=4, max_size=4
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=outputs, max_tokens=st.sampled_from([4, 64]))
async def test_react_never_raises_on_arbitrary_model_output(
    qwen_tok: Any, texts: list[str], max_tokens: int
) -> None:
    script = [ScriptedCompletion(text=t) for t in texts]
    agent, _ = make(
        ReActAgent,
        qwen_tok,
        script,
        tools=[double],
        max_react_steps=4,
        inference=InferenceSpec(sampling=SamplingParams(max_tokens=max_tokens)),
    )
    result = await agent.act()
    final = result.final_step
    if final.action_target == "env":
        assert final.parse_result is not None
        assert final.parse_result.action is not None or final.parse_result.obs
    else:
        assert final.action_target == "external"  # impossible here: no external tools
        pytest.fail("no external tools were configured")
    for prev, cur in zip(result.steps, result.steps[1:], strict=False):
        seq = prev.trace.prompt_token_ids + prev.trace.completion_token_ids
        assert cur.trace.prompt_token_ids[: len(seq)] == seq


async def test_the_scripted_token_client_keeps_the_whole_client_contract(qwen_tok: Any) -> None:
    from ludic_core.testing import check_client

    client = ScriptedTokenClient(qwen_tok, ["<answer>1</answer>"] * 8)
    # Prompt logprobs included: a teacher scorer (distillation) can be tested against this client.
    await check_client(
        client,
        prompt_token_ids=qwen_tok.encode("Hello there"),
        prompt_logprobs=True,
        deterministic_with_seed=False,
    )


async def test_the_agent_keeps_the_agent_harness_contract(qwen_tok: Any) -> None:
    from ludic_core.testing import check_agent

    def fresh() -> Agent:
        client = ScriptedTokenClient(qwen_tok, ["<answer>1</answer>", "no tags", "<answer>2</answer>"] * 4)
        return Agent(client=client, parser=ANSWER, chat_template=HFChatTemplate(qwen_tok))

    await check_agent(fresh, observations=["Pick a number.", "Wrong. Again.", "Once more."])


def test_the_chat_agent_is_registered_with_its_system_prompt(qwen_tok: Any) -> None:
    from ludic_core.registry import make_agent

    client = ScriptedTokenClient(qwen_tok, ["x"])
    agent = make_agent("chat", client=client, parser=ANSWER, system_prompt="Play well.")
    assert isinstance(agent, Agent) and agent.default_system_prompt == "Play well."
    assert make_agent("chat", client=client, parser=ANSWER).default_system_prompt is None


async def test_a_response_must_echo_the_prompt_ids_it_was_asked_for(qwen_tok: Any) -> None:
    """The same tuple back is accepted without comparing ids; an equal copy is compared and accepted;
    other ids are refused."""
    import attrs

    class Echoing(ScriptedTokenClient):
        def __init__(self, *args: Any, change: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.change = change

        async def complete_tokens(self, request: Any) -> Any:
            response = await super().complete_tokens(request)
            return attrs.evolve(response, prompt_token_ids=self.change(request.prompt_token_ids))

    for change, accepted in [(lambda ids: ids, True), (list, True), (lambda ids: ids[:-1], False)]:
        client = Echoing(qwen_tok, ["<answer>A1</answer>"], change=change)
        agent = Agent(client=client, parser=ANSWER, chat_template=HFChatTemplate(qwen_tok))
        agent.reset()
        agent.on_env_reset("start", {})
        if accepted:
            (step,) = (await agent.act()).steps
            assert step.trace.prompt_token_ids == client.requests[0].prompt_token_ids
        else:
            with pytest.raises(ProtocolError, match="prompt_token_ids that differ from the request"):
                await agent.act()
