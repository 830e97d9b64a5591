"""Parsers run on raw model output, so 1 MB of hostile text must parse in linear time.

Each input below made an earlier, regex-based version take quadratic time (tens of seconds on tens
of KB). Growth is checked by CPU time between two sizes (:func:`ludic_core.testing.assert_linear_time`),
never against a wall-clock bound that a loaded machine breaks.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ludic_agents import boxed_parser, extract_last_boxed_content, xml_parser
from ludic_agents.tool_parsers import HermesToolParser, Qwen3CoderToolParser
from ludic_core.testing import assert_linear_time

MB = 1_000_000


def _repeat(piece: str, total: int = MB) -> str:
    return piece * (total // len(piece))


def _scaled(text: str) -> Callable[[int], str]:
    """``text`` (built for 1 MB) cut to ``n`` characters: the same hostile pattern at another size,
    its closing tail kept."""
    tail = text[-64:]

    def make(n: int) -> str:
        return text if n >= len(text) else text[: max(0, n - len(tail))] + tail

    return make


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        (_repeat("<answer>"), False),  # every opening tag retried the lazy span to the end
        (_repeat("<answer>") + "</answer>", False),
        (_repeat("<answer>"), True),
        ("<answer>" + _repeat("</answer>x"), True),
        (_repeat(" ") + "x", True),
    ],
    ids=["unclosed", "closed-at-end", "exact-unclosed", "exact-many-closes", "exact-spaces"],
)
def test_xml_parser_is_linear(text: str, exact: bool) -> None:
    parser = xml_parser("answer", exact=exact)
    assert_linear_time(parser, _scaled(text))
    assert parser(text) is not None


def test_xml_parser_unclosed_tags_fail_and_closed_one_matches() -> None:
    assert xml_parser("answer")(_repeat("<answer>")).action is None
    ok = xml_parser("answer")(_repeat("<answer>") + "</answer>")
    assert ok.action is not None and ok.action.startswith("<answer>")


def test_think_prefix_remainder_is_linear() -> None:
    assert_linear_time(xml_parser("think", kind="remainder_after_prefix"), _scaled(_repeat("<think>")))


@pytest.mark.parametrize(
    "text",
    [
        _repeat("\\boxed{"),  # every marker scanned to the end
        _repeat("\\boxed{", MB // 2) + _repeat("}", MB // 2),  # deeply nested boxes
        "\\boxed{" + _repeat("{"),
        _repeat("\\boxed{\\{"),
    ],
    ids=["unclosed", "nested", "open-braces", "escaped-braces"],
)
def test_boxed_parser_is_linear(text: str) -> None:
    assert_linear_time(boxed_parser, _scaled(text))


def test_boxed_nested_result_is_the_innermost_last_box() -> None:
    depth = 1000
    text = "\\boxed{" * depth + "7" + "}" * depth
    assert extract_last_boxed_content(text) == "7"
    assert extract_last_boxed_content(text[:-1]) == "7"  # the outermost box never closes


@pytest.mark.parametrize(
    "text",
    [
        _repeat("<tool_call>"),  # every opening tag retried the lazy span to the end
        _repeat('<tool_call>{"name": "f"}</tool_call>'),
        "<tool_call>" + _repeat("<function=f>") + "</tool_call>",
        "<tool_call>" + _repeat("<function=") + "</tool_call>",
        "<tool_call><function=" + _repeat("f") + "</tool_call>",
        "<tool_call><function=f>" + _repeat("<parameter=k>") + "</function></tool_call>",
        "<tool_call><function=f>" + _repeat("<parameter=\n") + "</function></tool_call>",
    ],
    ids=[
        "unclosed",
        "many-blocks",
        "unclosed-functions",
        "unnamed-functions",
        "long-name",
        "unclosed-parameters",
        "parameters-broken-by-newlines",
    ],
)
@pytest.mark.parametrize(
    "parser", [HermesToolParser(), Qwen3CoderToolParser()], ids=["hermes", "qwen3_coder"]
)
def test_tool_parsers_are_linear(parser: HermesToolParser | Qwen3CoderToolParser, text: str) -> None:
    assert_linear_time(parser.parse, _scaled(text))


def test_unclosed_tool_calls_are_one_unterminated_block() -> None:
    result = HermesToolParser().parse("before " + _repeat("<tool_call>"))
    assert result.tool_calls == () and result.content == "before"
    assert len(result.errors) == 1 and "unterminated" in result.errors[0]
