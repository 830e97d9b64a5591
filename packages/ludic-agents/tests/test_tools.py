from __future__ import annotations

import asyncio
import enum
import json
import threading
from typing import Literal, Optional

import pytest

from ludic_agents import Tool, run_tool_call, tool, type_to_schema
from ludic_core.errors import ConfigError
from ludic_core.types import ToolCall


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def paint(
    wall: str,
    color: Color,
    coats: int = 2,
    finish: Literal["matte", "gloss"] = "matte",
    note: Optional[str] = None,  # noqa: UP045 - testing the typing.Optional spelling on purpose
    rooms: list[str] | None = None,
    ratio: float = 0.5,
    dry: bool = False,
) -> str:
    """Paint a wall.

    More details that are not part of the summary.

    Args:
        wall: which wall to paint.
        color: the paint colour.
        coats: how many coats; more coats
            look better.
        finish: surface finish.

    Returns:
        a receipt.
    """
    return f"{wall}:{color.value}:{coats}:{finish}:{note}:{rooms}:{ratio}:{dry}"


def numpy_style(x: int, tags: dict[str, int]) -> int:
    """Sum things.

    Parameters
    ----------
    x : int
        the base value.
    tags : dict
        extra values.

    Returns
    -------
    int
    """
    return x + sum(tags.values())


def test_schema_from_google_docstring_and_hints() -> None:
    schema = Tool.from_function(paint).schema()
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "paint"
    assert fn["description"] == "Paint a wall."
    props = fn["parameters"]["properties"]
    assert fn["parameters"]["required"] == ["wall", "color"]
    assert props["wall"] == {"type": "string", "description": "which wall to paint."}
    assert props["color"] == {"type": "string", "enum": ["red", "blue"], "description": "the paint colour."}
    assert props["coats"] == {
        "type": "integer",
        "description": "how many coats; more coats look better.",
        "default": 2,
    }
    assert props["finish"]["enum"] == ["matte", "gloss"] and props["finish"]["default"] == "matte"
    assert props["note"] == {"type": ["string", "null"], "default": None}
    assert props["rooms"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert props["ratio"]["type"] == "number" and props["dry"]["type"] == "boolean"
    json.dumps(schema)  # serialisable


def test_schema_from_numpy_docstring() -> None:
    fn = Tool.from_function(numpy_style).schema()["function"]
    assert fn["description"] == "Sum things."
    assert fn["parameters"]["properties"]["x"]["description"] == "the base value."
    assert fn["parameters"]["properties"]["tags"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
        "description": "extra values.",
    }


def test_type_to_schema_corner_cases() -> None:
    assert type_to_schema(tuple[int, str]) == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": False,
    }
    assert type_to_schema(int | str) == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert type_to_schema(list) == {"type": "array"}


def test_decorator_and_bad_names() -> None:
    @tool(name="renamed", timeout_s=1.0)
    def f(a: int) -> int:
        return a

    assert isinstance(f, Tool) and f.name == "renamed" and f.timeout_s == 1.0
    assert Tool.from_function(lambda: 1, name="nodoc").description == "No description provided."
    with pytest.raises(ConfigError, match="'<lambda>'"):
        Tool.from_function(lambda: 1)
    with pytest.raises(ConfigError, match="tool name"):
        Tool.from_function(paint, name="has space")
    with pytest.raises(ConfigError, match="timeout_s"):
        Tool.from_function(paint, timeout_s=0)


async def _run(call: ToolCall, *tools: Tool, timeout: float | None = 5.0) -> tuple[str, bool]:
    result, ok = await run_tool_call(call, {t.name: t for t in tools}, default_timeout_s=timeout)
    assert result.tool_call_id == call.id and result.tool_name == call.name
    return result.content, ok


async def test_run_sync_tool_with_enum_conversion() -> None:
    t = Tool.from_function(paint)
    content, ok = await _run(ToolCall("c1", "paint", '{"wall": "north", "color": "blue", "rooms": ["a"]}'), t)
    assert ok and content == "north:blue:2:matte:None:['a']:0.5:False"


async def test_tool_errors_become_messages() -> None:
    t = Tool.from_function(paint)

    def boom(x: int) -> int:
        raise RuntimeError("kaput")

    cases = {
        ToolCall("c", "missing", "{}"): "not found",
        ToolCall("c", "paint", "{not json"): "not valid JSON",
        ToolCall("c", "paint", "[1, 2]"): "must be a JSON object",
        ToolCall("c", "paint", '{"wall": "n"}'): "missing required arguments ['color']",
        ToolCall("c", "paint", '{"wall": "n", "color": "red", "zzz": 1}'): "unexpected arguments ['zzz']",
        ToolCall("c", "paint", '{"wall": "n", "color": "green"}'): "must be one of ['red', 'blue']",
        ToolCall("c", "boom", '{"x": 1}'): "raised RuntimeError: kaput",
    }
    for call, expected in cases.items():
        content, ok = await _run(call, t, Tool.from_function(boom))
        assert not ok and content.startswith("Error:") and expected in content, content


async def test_async_tool_and_result_formatting() -> None:
    async def fetch(key: str) -> dict[str, int]:
        """Fetch."""
        await asyncio.sleep(0)
        return {key: 1}

    content, ok = await _run(ToolCall("c", "fetch", '{"key": "k"}'), Tool.from_function(fetch))
    assert ok and json.loads(content) == {"k": 1}


async def test_hanging_tools_hit_the_timeout() -> None:
    release = threading.Event()

    def hang_sync() -> str:
        release.wait(5)
        return "late"

    async def hang_async() -> str:
        await asyncio.sleep(5)
        return "late"

    try:
        for fn in (hang_sync, hang_async):
            content, ok = await _run(ToolCall("c", fn.__name__, "{}"), Tool.from_function(fn), timeout=0.05)
            assert not ok and "timed out after 0.05 s" in content
        per_tool = Tool.from_function(hang_async, timeout_s=0.05)
        content, ok = await _run(ToolCall("c", "hang_async", ""), per_tool, timeout=None)
        assert not ok and "timed out" in content
    finally:
        release.set()
