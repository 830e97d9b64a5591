from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ludic_agents import (
    boxed_parser,
    compose_parsers,
    cot_prefix_parser,
    extract_last_boxed_content,
    think_prefix_parser,
    xml_parser,
    xml_tag_parser,
)
from ludic_core.errors import ConfigError
from ludic_core.parsing import ParseResult


def test_xml_tag_inner_first_match_case_insensitive_multiline() -> None:
    p = xml_tag_parser("move")
    assert p("blah <MOVE>\n A1 \n</move> <move>B2</move>") == ParseResult("A1", 0.1, None)


def test_xml_tag_failures_have_feedback_and_penalty() -> None:
    p = xml_tag_parser("move", success_reward=0.5, error_reward=-2.0)
    missing = p("no tag")
    assert missing.action is None and missing.reward == -2.0
    assert missing.obs is not None and missing.obs.startswith("Invalid action format")
    assert p("<move>  </move>").action is None


def test_xml_tag_exact() -> None:
    p = xml_tag_parser("move", exact=True)
    assert p("  <move>A1</move>\n").action == "A1"
    assert p("I pick <move>A1</move>").action is None


def test_remainder_after_prefix_and_config_errors() -> None:
    p = xml_parser("think", kind="remainder_after_prefix")
    assert p(" <think>hmm</think> B2 ").action == "B2"
    assert p("B2 <think>hmm</think>").action is None
    assert p("<think>hmm</think>   ").action is None
    with pytest.raises(ConfigError, match="exact=True"):
        xml_parser("think", kind="remainder_after_prefix", exact=True)
    with pytest.raises(ConfigError, match="kind"):
        xml_parser("think", kind="outer")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="xml tag"):
        xml_tag_parser("bad tag")


def test_think_prefix_parser_and_alias() -> None:
    assert think_prefix_parser("<think>a</think>\nanswer") == ParseResult("answer", 0.1, None)
    failed = think_prefix_parser("answer", error_reward=-3.0)
    assert failed.action is None and failed.reward == -3.0 and failed.obs
    assert cot_prefix_parser is think_prefix_parser


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (r"\boxed{42}", "42"),
        (r"first \boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{a \{ b}", r"a \{ b"),
        (r"\boxed{unclosed", None),
        (r"\boxed{1} and \boxed{unclosed", "1"),
        ("nothing", None),
    ],
)
def test_extract_last_boxed(raw: str, expected: str | None) -> None:
    assert extract_last_boxed_content(raw) == expected


def test_boxed_parser() -> None:
    assert boxed_parser(r"so \boxed{ 7 }") == ParseResult("7", 0.1, None)
    bad = boxed_parser(r"\boxed{}")
    assert bad.action is None and bad.obs is not None and bad.obs.startswith("Invalid boxed answer")


def test_compose_accumulates_and_stops_at_first_failure() -> None:
    p = compose_parsers(think_prefix_parser, xml_tag_parser("answer", success_reward=0.2, error_reward=-0.5))
    ok = p("<think>x</think><answer>5</answer>")
    assert (ok.action, ok.obs) == ("5", None) and ok.reward == pytest.approx(0.3)
    second_fails = p("<think>x</think>5")
    assert second_fails.action is None and second_fails.reward == pytest.approx(0.1 - 0.5)
    assert second_fails.obs is not None and "<answer>" in second_fails.obs
    first_fails = p("<answer>5</answer>")
    assert first_fails.action is None and first_fails.reward == -1.0
    with pytest.raises(ConfigError):
        compose_parsers()


ALL_PARSERS = [
    xml_tag_parser("answer"),
    xml_tag_parser("answer", exact=True),
    xml_parser("think", kind="remainder_after_prefix"),
    think_prefix_parser,
    boxed_parser,
    compose_parsers(think_prefix_parser, boxed_parser),
    compose_parsers(think_prefix_parser, xml_tag_parser("move")),
]

_fragments = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<move>",
        "</move>",
        "\\boxed{",
        "{",
        "}",
        "\\",
        "\n",
        " ",
    ]
)
model_text = st.lists(st.one_of(st.text(max_size=20), _fragments), max_size=25).map("".join)


@settings(max_examples=300, deadline=None)
@given(raw=model_text)
def test_every_parser_total_on_arbitrary_text(raw: str) -> None:
    for parser in ALL_PARSERS:
        result = parser(raw)
        assert isinstance(result, ParseResult)
        if result.action is None:
            assert result.obs, "a failure must come with feedback"
        else:
            assert isinstance(result.action, str) and result.action.strip() == result.action
