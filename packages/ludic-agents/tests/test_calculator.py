"""The calculator tool (registered as ``"calculator"``): exact arithmetic that never runs code, and
every mistake a message the model sees."""

from __future__ import annotations

import asyncio

import pytest

from ludic_agents.calculator import calculate, calculator_tool
from ludic_agents.tools import registered_tool, run_tool_call
from ludic_core.types import ToolCall


def test_the_calculator_is_exact_and_runs_no_code() -> None:
    assert calculate("347 * 28 + 905 * 613") == str(347 * 28 + 905 * 613)
    assert calculate("12 × 3 - (4 - 10)") == "42"
    assert calculate("7 / 2") == "3.5" and calculate("6 / 3") == "2"
    for bad, reason in [
        ("__import__('os').getcwd()", "only integers"),
        ("2 ** 64", "only integers"),
        ("1.5 * 2", "only integers"),
        ("1 / (2 - 2)", "division by zero"),
        ("12 *", "cannot read"),
        ("1 + " * 60 + "1", "longer than"),
    ]:
        with pytest.raises(ValueError, match=reason):
            calculate(bad)


def test_a_bad_call_reaches_the_model_as_an_error() -> None:
    tools = {"calculator": calculator_tool()}
    ok, good = asyncio.run(run_tool_call(ToolCall("c1", "calculator", '{"expression": "2 * 21"}'), tools))
    assert good and ok.content == "42"
    bad, good = asyncio.run(run_tool_call(ToolCall("c2", "calculator", '{"expression": "2 ** 9"}'), tools))
    assert not good and bad.content.startswith("Error:") and "only integers" in bad.content


def test_it_is_registered_by_name_with_its_schema() -> None:
    tool = registered_tool("calculator")
    assert tool.name == "calculator" and tool.timeout_s == 5.0
    assert list(tool.parameters["properties"]) == ["expression"]
