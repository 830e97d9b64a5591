"""Parsers run on raw model output, so 1 MB of hostile text must parse in linear time.

Each input below made an earlier, regex-based version take quadratic time (tens of seconds on tens
of KB). The bound is deliberately loose (a linear parse takes well under a second; a quadratic one
takes minutes at this size), so a machine loaded by parallel jobs does not make it flaky.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ludic_agents import boxed_parser, extract_last_boxed_content, xml_parser
from ludic_agents.tool_parsers import HermesToolParser, Qwen3CoderToolParser

MB = 1_000_000
BOUND_S = 10.0


def _timed(fn: Callable[[str], object], text: str) -> tuple[object, float]:
    start = time.perf_counter()
    result = fn(text)
    return result, time.perf_counter() - start


def _repeat(piece: str, total: int = MB) -> str:
    return piece * (total // len(piece))


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
    result, elapsed = _timed(xml_parser("answer", exact=exact), text)
    assert elapsed < BOUND_S, f"xml_parser took {elapsed:.2f}s on {len(text)} chars"
    assert result is not None


def test_xml_parser_unclosed_tags_fail_and_closed_one_matches() -> None:
    assert xml_parser("answer")(_repeat("<answer>")).action is None
    ok = xml_parser("answer")(_repeat("<answer>") + "</answer>")
    assert ok.action is not None and ok.action.startswith("<answer>")


def test_think_prefix_remainder_is_linear() -> None:
    _, elapsed = _timed(xml_parser("think", kind="remainder_after_prefix"), _repeat("<think>"))
    assert elapsed < BOUND_S


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
    _, elapsed = _timed(boxed_parser, text)
    assert elapsed < BOUND_S, f"boxed_parser took {elapsed:.2f}s on {len(text)} chars"


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
    _, elapsed = _timed(parser.parse, text)
    assert elapsed < BOUND_S, f"{parser.name} took {elapsed:.2f}s on {len(text)} chars"


def test_unclosed_tool_calls_are_one_unterminated_block() -> None:
    result = HermesToolParser().parse("before " + _repeat("<tool_call>"))
    assert result.tool_calls == () and result.content == "before"
    assert len(result.errors) == 1 and "unterminated" in result.errors[0]
