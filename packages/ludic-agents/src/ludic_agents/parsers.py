"""Parsers with intrinsic format rewards.

A parser turns raw model text into an env action, or a failure with feedback for the model
(:class:`~ludic_core.parsing.ParseResult`). Parsers never raise on model output: any string gives a
result. Configuration mistakes (an unknown ``kind``, ``exact=True`` where it has no meaning) raise
:class:`~ludic_core.errors.ConfigError` when the parser is built, not when it runs.

Composition (:func:`compose_parsers`) runs parsers left to right, each on the previous action;
rewards accumulate and the first failure stops the chain.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from ludic_core.errors import ConfigError
from ludic_core.parsing import Parser, ParseResult

__all__ = [
    "boxed_parser",
    "compose_parsers",
    "cot_prefix_parser",
    "extract_last_boxed_content",
    "think_prefix_parser",
    "xml_parser",
    "xml_tag_parser",
]

XmlKind = Literal["inner", "remainder_after_prefix"]
_TAG_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


def compose_parsers(*parsers: Parser) -> Parser:
    """Chain parsers: each runs on the previous parser's action.

    Rewards add up. The first failure returns ``action=None``, the rewards so far plus the failing
    parser's reward, and the failing parser's feedback. On success the feedback is ``None``.
    """
    if not parsers:
        raise ConfigError("compose_parsers needs at least one parser")
    for i, p in enumerate(parsers):
        if not callable(p):
            raise ConfigError(f"compose_parsers: parsers[{i}] must be callable, got {p!r}")

    def composed(raw: str) -> ParseResult:
        current = raw
        total = 0.0
        for parser in parsers:
            result = parser(current)
            total += result.reward
            if result.action is None:
                return ParseResult(action=None, reward=total, obs=result.obs)
            current = result.action
        return ParseResult(action=current, reward=total, obs=None)

    return composed


def _check_tag(tag: str) -> None:
    if not isinstance(tag, str) or not _TAG_NAME.match(tag):
        raise ConfigError(f"xml tag must be a name like 'move' or 'answer', got {tag!r}")


def xml_parser(
    tag: str,
    *,
    exact: bool = False,
    kind: XmlKind = "inner",
    success_reward: float = 0.1,
    error_reward: float = -1.0,
) -> Parser:
    """Parse an XML-style tag (case-insensitive, spanning lines).

    * ``kind="inner"``: the action is the stripped inner text of the first ``<tag>…</tag>``. With
      ``exact=True`` the whole output (outer whitespace aside) must be exactly one such tag. Empty
      inner text fails.
    * ``kind="remainder_after_prefix"``: the output must start (after whitespace) with
      ``<tag>…</tag>``; the action is the stripped, non-empty text after it. ``exact`` is meaningless
      here and rejected.
    """
    _check_tag(tag)
    if kind not in ("inner", "remainder_after_prefix"):
        raise ConfigError(f"xml_parser kind must be 'inner' or 'remainder_after_prefix', got {kind!r}")
    if kind == "remainder_after_prefix" and exact:
        raise ConfigError("xml_parser: exact=True is only meaningful with kind='inner'")
    t = re.escape(tag)
    flags = re.IGNORECASE | re.DOTALL
    if kind == "inner":
        # Anchored at the start, so the engine tries one position and the lazy span is scanned once.
        exact_pattern = re.compile(rf"^\s*<{t}>(.*?)</{t}>\s*$", flags)
        open_tag = re.compile(rf"<{t}>", re.IGNORECASE)
        close_tag = re.compile(rf"</{t}>", re.IGNORECASE)

        def first_block(raw: str) -> str | None:
            # What ``<tag>(.*?)</tag>`` finds with ``search``, in one pass: that regex retries the lazy
            # span from every opening tag, so many unclosed tags cost quadratic time. The first
            # opening tag is the match when any closing tag follows it, and none can match otherwise.
            opened = open_tag.search(raw)
            if opened is None:
                return None
            closed = close_tag.search(raw, opened.end())
            return None if closed is None else raw[opened.end() : closed.start()]

        def parse_inner(raw: str) -> ParseResult:
            if exact:
                match = exact_pattern.search(raw)
                block = None if match is None else match.group(1)
            else:
                block = first_block(raw)
            if block is None:
                where = "exactly one" if exact else "a"
                return ParseResult(
                    None, error_reward, f"Invalid action format: expected {where} <{tag}>...</{tag}> block."
                )
            inner = block.strip()
            if not inner:
                return ParseResult(None, error_reward, f"Invalid action format: <{tag}> block is empty.")
            return ParseResult(inner, success_reward, None)

        return parse_inner

    prefix = re.compile(rf"^\s*<{t}>(.*?)</{t}>(.*)$", flags)

    def parse_remainder(raw: str) -> ParseResult:
        match = prefix.match(raw)
        if match is None:
            return ParseResult(
                None,
                error_reward,
                f"Invalid action format: the answer must start with <{tag}>...</{tag}> followed by the action.",
            )
        rest = match.group(2).strip()
        if not rest:
            return ParseResult(None, error_reward, f"Invalid action format: nothing follows </{tag}>.")
        return ParseResult(rest, success_reward, None)

    return parse_remainder


def xml_tag_parser(
    tag: str, *, exact: bool = False, success_reward: float = 0.1, error_reward: float = -1.0
) -> Parser:
    """The stripped inner text of the first ``<tag>…</tag>`` (see :func:`xml_parser`)."""
    return xml_parser(
        tag, exact=exact, kind="inner", success_reward=success_reward, error_reward=error_reward
    )


_THINK_PREFIX = xml_parser("think", kind="remainder_after_prefix")


def think_prefix_parser(raw: str, *, success_reward: float = 0.1, error_reward: float = -1.0) -> ParseResult:
    """The text after a leading ``<think>…</think>`` block, which must be present and non-empty."""
    result = _THINK_PREFIX(raw)
    return ParseResult(result.action, success_reward if result.ok else error_reward, result.obs)


cot_prefix_parser: Callable[..., ParseResult] = think_prefix_parser


_BOXED_MARKER = "\\boxed{"
# A backslash with the character it escapes, or a brace: the only things brace matching looks at.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def extract_last_boxed_content(raw: str) -> str | None:
    r"""The content of the last well-formed ``\boxed{…}``; nested braces are balanced and
    backslash-escaped braces (``\{``, ``\}``) do not count. ``None`` when there is none."""
    if _BOXED_MARKER not in raw:
        return None
    # One left-to-right pass with a stack of open braces: scanning to the end from every marker
    # costs quadratic time on many unclosed markers. The brace of a marker always follows a "d",
    # so it is never escaped and the pass matches it exactly as a scan starting there would.
    open_braces: list[int] = []
    best: tuple[int, int] | None = None  # (start, end) of the content of the last-starting box
    for token in _BRACE_TOKEN.finditer(raw):
        ch = token.group()
        if ch == "{":
            open_braces.append(token.start())
        elif ch == "}" and open_braces:
            brace = open_braces.pop()
            marker = brace - len(_BOXED_MARKER) + 1
            is_box = marker >= 0 and raw.startswith(_BOXED_MARKER, marker)
            if is_box and (best is None or brace + 1 > best[0]):
                best = (brace + 1, token.start())
    return None if best is None else raw[best[0] : best[1]]


def boxed_parser(raw: str, *, success_reward: float = 0.1, error_reward: float = -1.0) -> ParseResult:
    r"""The stripped content of the last ``\boxed{…}``; empty or missing fails."""
    content = extract_last_boxed_content(raw)
    if content is None or not content.strip():
        return ParseResult(None, error_reward, "Invalid boxed answer: put the final answer in \\boxed{...}.")
    return ParseResult(content.strip(), success_reward, None)
