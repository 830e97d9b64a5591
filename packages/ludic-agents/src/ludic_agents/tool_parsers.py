"""Tool-call parsers: find the tool calls a model wrote in its completion text.

Formats, by name through :func:`get_tool_parser`: ``"hermes"`` (aliases ``"qwen2.5"``, ``"qwen3"``),
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks of one JSON object each; and
``"qwen3_coder"``, Qwen3-Coder's XML form (``<tool_call><function=NAME><parameter=ARG>value</parameter>
...``), whose text values are converted with the tool's schema when given (``string`` stays text, other
types are read as JSON), else read as JSON when they parse. A parser never raises on model text: it
returns the calls it could read, the text without tool-call blocks (``content``) and one error string
per block it could not read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_core.errors import ConfigError
from ludic_core.types import ToolCall

__all__ = [
    "HermesToolParser",
    "Qwen3CoderToolParser",
    "ToolCallParser",
    "ToolParseResult",
    "get_tool_parser",
    "tool_parser_names",
]


@attrs.frozen
class ToolParseResult:
    """``tool_calls`` in order of appearance; ``errors`` describe blocks that could not be read."""

    tool_calls: tuple[ToolCall, ...] = ()
    content: str = ""
    errors: tuple[str, ...] = ()

    @property
    def parse_error(self) -> bool:
        return bool(self.errors)


@runtime_checkable
class ToolCallParser(Protocol):
    name: str

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolParseResult:
        """Read tool calls from ``text``; ``tools`` are OpenAI function schemas (for type conversion)."""
        ...


_OPEN = "<tool_call>"
_CLOSE = "</tool_call>"


def _blocks(text: str, open_: str, close: str, start: int = 0) -> Iterator[tuple[int, int, str]]:
    """``(start, end, body)`` of each ``open_ body close`` block, as ``finditer`` over
    ``open_(.*?)close`` (DOTALL) finds them, in linear time.

    That regex retries its lazy span from every opening marker, so text with many unclosed markers
    costs quadratic time. Here the first opening marker at or after the search position is the next
    match whenever a closing marker follows it, and when none follows no later opening can match.
    """
    pos = start
    while True:
        opened = text.find(open_, pos)
        if opened == -1:
            return
        closed = text.find(close, opened + len(open_))
        if closed == -1:
            return
        yield opened, closed + len(close), text[opened + len(open_) : closed]
        pos = closed + len(close)


_NAME_STOP = re.compile(r"[>\n]")


def _named_blocks(text: str, open_: str, close: str) -> Iterator[tuple[str, str]]:
    """``(name, body)`` of each block ``finditer`` over ``open_([^>\n]+)>(.*?)close`` (DOTALL) finds,
    in linear time (``open_`` is ``<function=`` or ``<parameter=``).

    A name runs to the first ``>`` or newline, so a candidate whose name stops at a newline (or is
    empty) cannot match and the next one is tried; the name stop is remembered, since every
    candidate that starts before it stops there too. A valid candidate with no closing marker after
    its ``>`` ends the search: every later candidate's ``>`` is at or after it.
    """
    pos = 0
    stop_from, stop = -1, -1  # the search position and result of the last name-stop search
    while True:
        opened = text.find(open_, pos)
        if opened == -1:
            return
        name_start = opened + len(open_)
        if not stop_from <= name_start <= stop:
            found = _NAME_STOP.search(text, name_start)
            stop_from, stop = name_start, (found.start() if found else len(text))
        if stop == len(text):
            return
        if stop == name_start or text[stop] != ">":
            pos = opened + 1
            continue
        closed = text.find(close, stop + 1)
        if closed == -1:
            return
        yield text[name_start:stop], text[stop + 1 : closed]
        pos = closed + len(close)


def _strip_blocks(text: str, spans: list[tuple[int, int]]) -> str:
    pieces, last = [], 0
    for start, end in spans:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return "".join(pieces).strip()


def _unterminated(text: str, spans: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The span of a ``<tool_call>`` opened after the last complete block and never closed."""
    tail_start = spans[-1][1] if spans else 0
    idx = text.find(_OPEN, tail_start)
    return (idx, len(text)) if idx != -1 else None


def _tool_call_result(
    text: str, calls: list[ToolCall], errors: list[str], spans: list[tuple[int, int]]
) -> ToolParseResult:
    """The parse of ``text``'s ``<tool_call>`` blocks (at ``spans``), an unterminated last block an error."""
    dangling = _unterminated(text, spans)
    if dangling is not None:
        errors.append(f"an unterminated <tool_call> block: {text[dangling[0] :][:200]!r}")
        spans.append(dangling)
    return ToolParseResult(tool_calls=tuple(calls), content=_strip_blocks(text, spans), errors=tuple(errors))


class HermesToolParser:
    """``<tool_call>{json}</tool_call>`` blocks (Hermes-2-Pro, Qwen2.5, Qwen3)."""

    name = "hermes"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolParseResult:
        calls: list[ToolCall] = []
        errors: list[str] = []
        spans: list[tuple[int, int]] = []
        for i, (start, end, block) in enumerate(_blocks(text, _OPEN, _CLOSE)):
            spans.append((start, end))
            body = block.strip()
            try:
                obj = json.loads(body)
            except json.JSONDecodeError as exc:
                errors.append(
                    f"tool call {i}: invalid JSON ({exc.msg} at position {exc.pos}): {body[:200]!r}"
                )
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
                errors.append(
                    f'tool call {i}: expected an object with a non-empty "name", got {body[:200]!r}'
                )
                continue
            arguments = obj.get("arguments", obj.get("parameters", {}))
            # Models sometimes write the arguments as a JSON string; keep the text so the tool
            # runner can report exactly what was wrong with it.
            raw_args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            calls.append(ToolCall(id=f"call_{len(calls)}", name=obj["name"], arguments=raw_args))
        return _tool_call_result(text, calls, errors, spans)


def _param_types(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for schema in tools or ():
        fn = schema.get("function", schema)
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[str(fn.get("name"))] = {k: v.get("type") for k, v in props.items() if isinstance(v, Mapping)}
    return out


def _convert(value: str, declared: Any) -> Any:
    types_ = set(declared) if isinstance(declared, list) else {declared}
    if types_ & {"string"} and not (types_ - {"string", "null"}):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if "boolean" in types_ and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value


class Qwen3CoderToolParser:
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`` blocks."""

    name = "qwen3_coder"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolParseResult:
        declared = _param_types(tools)
        calls: list[ToolCall] = []
        errors: list[str] = []
        spans: list[tuple[int, int]] = []
        for i, (start, end, block) in enumerate(_blocks(text, _OPEN, _CLOSE)):
            spans.append((start, end))
            function = next(_named_blocks(block, "<function=", "</function>"), None)
            if function is None:
                errors.append(f"tool call {i}: no <function=...>...</function> inside: {block[:200]!r}")
                continue
            name = function[0].strip()
            types_for = declared.get(name, {})
            arguments: dict[str, Any] = {}
            for raw_key, value in _named_blocks(function[1], "<parameter=", "</parameter>"):
                key = raw_key.strip()
                # The template writes "\n" around each value; strip exactly those, keep the rest.
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                arguments[key] = (
                    _convert(value, types_for.get(key)) if key in types_for or not types_for else value
                )
            calls.append(
                ToolCall(
                    id=f"call_{len(calls)}", name=name, arguments=json.dumps(arguments, ensure_ascii=False)
                )
            )
        return _tool_call_result(text, calls, errors, spans)


_PARSERS: dict[str, type[HermesToolParser] | type[Qwen3CoderToolParser]] = {
    "hermes": HermesToolParser,
    "qwen2.5": HermesToolParser,
    "qwen3": HermesToolParser,
    "qwen3_coder": Qwen3CoderToolParser,
}


def tool_parser_names() -> list[str]:
    return sorted(_PARSERS)


def get_tool_parser(name: str | ToolCallParser) -> ToolCallParser:
    """A tool-call parser by name (see the module docstring), or the parser itself."""
    if not isinstance(name, str):
        if isinstance(name, ToolCallParser):
            return name
        raise ConfigError(f"tool_parser must be a name or a ToolCallParser, got {name!r}")
    cls = _PARSERS.get(name.lower())
    if cls is None:
        raise ConfigError(f"unknown tool_parser {name!r}; known: {tool_parser_names()}")
    return cls()
