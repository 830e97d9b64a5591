from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ludic_agents import HermesToolParser, Qwen3CoderToolParser, get_tool_parser, tool_parser_names
from ludic_core.errors import ConfigError


def test_hermes_parses_calls_and_strips_blocks() -> None:
    text = (
        'Let me check.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>{"name": "now"}</tool_call>'
    )
    result = HermesToolParser().parse(text)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("call_0", "add", {"a": 1, "b": 2}),
        ("call_1", "now", {}),
    ]
    assert result.content == "Let me check." and not result.parse_error


def test_hermes_reports_bad_blocks_but_keeps_good_ones() -> None:
    text = '<tool_call>{bad}</tool_call><tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "ok"}</tool_call>'
    result = HermesToolParser().parse(text)
    assert [c.name for c in result.tool_calls] == ["ok"]
    assert len(result.errors) == 2 and "invalid JSON" in result.errors[0] and '"name"' in result.errors[1]


def test_hermes_unterminated_block_is_an_error() -> None:
    result = HermesToolParser().parse('answer <tool_call>{"name": "add", "argu')
    assert result.tool_calls == () and result.parse_error and "unterminated" in result.errors[0]
    assert result.content == "answer"


def test_hermes_string_arguments_are_kept_verbatim() -> None:
    result = HermesToolParser().parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1"}</tool_call>')
    assert result.tool_calls[0].arguments == '{"a": 1'


QWEN3_CODER_TEXT = """I'll look it up.
<tool_call>
<function=search>
<parameter=query>
what is 2+2?
</parameter>
<parameter=limit>
5
</parameter>
<parameter=filters>
{"lang": "en"}
</parameter>
<parameter=code>
0012
</parameter>
</function>
</tool_call>"""

SCHEMA = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "filters": {"type": "object"},
                    "code": {"type": "string"},
                },
            },
        },
    }
]


def test_qwen3_coder_xml_with_schema_types() -> None:
    result = Qwen3CoderToolParser().parse(QWEN3_CODER_TEXT, tools=SCHEMA)
    (call,) = result.tool_calls
    assert call.name == "search"
    assert json.loads(call.arguments) == {
        "query": "what is 2+2?",
        "limit": 5,
        "filters": {"lang": "en"},
        "code": "0012",
    }
    assert result.content == "I'll look it up."


def test_qwen3_coder_without_schema_reads_json_when_possible() -> None:
    (call,) = Qwen3CoderToolParser().parse(QWEN3_CODER_TEXT).tool_calls
    args = json.loads(call.arguments)
    assert args["limit"] == 5 and args["query"] == "what is 2+2?" and args["filters"] == {"lang": "en"}


def test_qwen3_coder_block_without_function_is_an_error() -> None:
    result = Qwen3CoderToolParser().parse("<tool_call>\n{}\n</tool_call>")
    assert result.tool_calls == () and "no <function=" in result.errors[0]


def test_parser_registry() -> None:
    assert {"hermes", "qwen2.5", "qwen3", "qwen3_coder"} <= set(tool_parser_names())
    assert isinstance(get_tool_parser("Qwen2.5"), HermesToolParser)
    assert isinstance(get_tool_parser("qwen3_coder"), Qwen3CoderToolParser)
    parser = HermesToolParser()
    assert get_tool_parser(parser) is parser
    with pytest.raises(ConfigError, match="unknown tool_parser 'nope'"):
        get_tool_parser("nope")


_bits = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<function=f>",
        "</function>",
        "<parameter=x>",
        "</parameter>",
        '{"name": "f"}',
        "{",
        "\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.one_of(st.text(max_size=15), _bits), max_size=20).map("".join))
def test_tool_parsers_total_on_arbitrary_text(text: str) -> None:
    for parser in (HermesToolParser(), Qwen3CoderToolParser()):
        result = parser.parse(text, tools=SCHEMA)
        for call in result.tool_calls:
            assert call.name
            json.loads(call.arguments) if parser.name == "qwen3_coder" else None
