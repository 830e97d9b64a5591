"""Tools: Python callables described to the model by a JSON schema built from type hints and docstrings.

:func:`tool` / :meth:`Tool.from_function` map ``int``/``float``/``bool``/``str``/``None`` to JSON types,
``Optional[X]`` to a nullable ``X``, ``list``/``tuple``/``set`` to arrays, ``dict[str, X]`` to objects,
and ``Literal`` and ``Enum`` to ``enum``; parameters without a default are required. Descriptions come
from the docstring's summary and its Google- or NumPy-style parameter sections. :func:`run_tool_call`
runs one :class:`~ludic_core.messages.ToolCall` and never raises for a model mistake: unknown tools, bad
arguments, exceptions and timeouts become an error message the model sees as the tool result.

:data:`TOOLS` names tools for agents built from a config (entry-point group ``ludic.tools``: name ->
a callable taking no arguments and returning a :class:`Tool`); ludic-agents registers ``calculator``.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.registry import Registry
from ludic_core.types import ToolCall, ToolResult

__all__ = ["TOOLS", "Tool", "registered_tool", "run_tool_call", "tool", "type_to_schema"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-.]{0,63}$")


def type_to_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema for a Python type annotation (unknown types become ``string``)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is str:
        return {"type": "string"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
        schema = _literal_schema(values)
        return schema
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return _literal_schema(list(args))
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            inner = type_to_schema(non_null[0])
            if len(non_null) < len(args):
                return _nullable(inner)
            return inner
        variants = [type_to_schema(a) for a in args]
        return {"anyOf": variants}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set, frozenset):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [type_to_schema(a) for a in args], "items": False}
        item = type_to_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin is dict or annotation is dict:
        if len(args) == 2 and type_to_schema(args[1]):
            return {"type": "object", "additionalProperties": type_to_schema(args[1])}
        return {"type": "object"}
    return {"type": "string"}


def _literal_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {type(v) for v in values}
    schema: dict[str, Any] = {"enum": values}
    if kinds == {str}:
        schema = {"type": "string", "enum": values}
    elif kinds == {int}:
        schema = {"type": "integer", "enum": values}
    return schema


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "type" in schema and isinstance(schema["type"], str):
        out = dict(schema)
        out["type"] = [schema["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [schema, {"type": "null"}]}


_GOOGLE_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$")
_GOOGLE_END = re.compile(r"^\s*(Returns?|Raises?|Yields?|Examples?|Notes?|See Also|Attributes)\s*:?\s*$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(summary, {parameter: description})`` from a Google- or NumPy-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    for idx, line in enumerate(lines):
        numpy_header = idx + 1 < len(lines) and bool(_NUMPY_RULE.match(lines[idx + 1]))
        if not line.strip() or _GOOGLE_SECTION.match(line) or numpy_header:
            break
        summary_lines.append(line.strip())
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if _GOOGLE_SECTION.match(line):
            i = _parse_google(lines, i + 1, params)
            continue
        if (
            line.strip() in ("Parameters", "Params", "Arguments")
            and i + 1 < len(lines)
            and _NUMPY_RULE.match(lines[i + 1])
        ):
            i = _parse_numpy(lines, i + 2, params)
            continue
        i += 1
    return " ".join(summary_lines), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parse_google(lines: list[str], i: int, params: dict[str, str]) -> int:
    entry = re.compile(r"^\s*\*{0,2}([A-Za-z_]\w*)\s*(\([^)]*\))?\s*:\s*(.*)$")
    base: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if _GOOGLE_END.match(line) or _GOOGLE_SECTION.match(line):
            return i
        if not line.strip():
            i += 1
            continue
        if base is None:
            base = _indent(line)
        if _indent(line) < base:
            return i
        match = entry.match(line)
        if match and _indent(line) == base:
            current = match.group(1)
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
        i += 1
    return i


def _parse_numpy(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and _NUMPY_RULE.match(lines[i + 1]):
            return i  # the next section starts
        if not line.strip():
            i += 1
            continue
        if _indent(line) == 0:
            current = line.split(":", 1)[0].strip().lstrip("*")
            params[current] = ""
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
        i += 1
    return i


@attrs.frozen
class Tool:
    """A callable the model may call, with its OpenAI function schema.

    ``timeout_s`` bounds one call (``None``: the agent's default). Sync functions run in a worker
    thread so that a hanging one cannot block the event loop; on timeout the model gets an error
    message (the thread itself cannot be killed and finishes in the background).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any] = attrs.field(eq=False, repr=False)
    timeout_s: float | None = None
    enum_params: Mapping[str, type[enum.Enum]] = attrs.field(factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(f"tool name must match {_NAME.pattern}, got {self.name!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ConfigError(f"Tool {self.name!r}: timeout_s must be > 0 or None, got {self.timeout_s!r}")

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``{"type": "function", "function": {...}}`` schema chat templates expect."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
    ) -> Tool:
        if not callable(fn):
            raise ConfigError(f"a tool must be callable, got {fn!r}")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name:
            raise ConfigError(f"tool {fn!r} has no __name__; pass name=")
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:  # unresolvable forward references
            raise ConfigError(f"tool {tool_name!r}: cannot resolve type hints: {exc}") from exc
        summary, param_docs = parse_docstring(inspect.getdoc(fn))
        properties: dict[str, Any] = {}
        required: list[str] = []
        enums: dict[str, type[enum.Enum]] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise ConfigError(
                    f"tool {tool_name!r}: parameter {pname!r} is positional-only; tools take keywords"
                )
            annotation = hints.get(pname, param.annotation)
            prop = type_to_schema(annotation)
            enum_type = _enum_type(annotation)
            if enum_type is not None:
                enums[pname] = enum_type
            if param_docs.get(pname):
                prop["description"] = param_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            else:
                default = param.default.value if isinstance(param.default, enum.Enum) else param.default
                if _json_ok(default):
                    prop["default"] = default
            properties[pname] = prop
        parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
        return cls(
            name=tool_name,
            description=description or summary or "No description provided.",
            parameters=parameters,
            fn=fn,
            timeout_s=timeout_s,
            enum_params=enums,
        )


def _enum_type(annotation: Any) -> type[enum.Enum] | None:
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _enum_type(arg)
            if found is not None:
                return found
    return None


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, timeout_s: float | None = None
) -> Any:
    """Decorator form of :meth:`Tool.from_function` (``@tool`` or ``@tool(name=..., timeout_s=...)``)."""
    if fn is None:
        return lambda f: Tool.from_function(f, name=name, timeout_s=timeout_s)
    return Tool.from_function(fn, name=name, timeout_s=timeout_s)


def _bind_arguments(t: Tool, raw: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON ({exc.msg} at position {exc.pos}): {raw[:200]!r}"
    if not isinstance(args, dict):
        return None, f"arguments must be a JSON object, got {type(args).__name__}: {raw[:200]!r}"
    props = t.parameters.get("properties", {})
    accepts_kwargs = any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(t.fn).parameters.values()
    )
    unknown = sorted(set(args) - set(props))
    if unknown and not accepts_kwargs:
        return None, f"unexpected arguments {unknown}; expected {sorted(props)}"
    missing = [p for p in t.parameters.get("required", []) if p not in args]
    if missing:
        return None, f"missing required arguments {missing}"
    for pname, enum_type in t.enum_params.items():
        if pname in args and args[pname] is not None:
            try:
                args[pname] = enum_type(args[pname])
            except ValueError:
                allowed = [m.value for m in enum_type]
                return None, f"argument {pname!r} must be one of {allowed}, got {args[pname]!r}"
    return args, None


def _format_result(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)) and _json_ok(value):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


async def run_tool_call(
    call: ToolCall, tools: Mapping[str, Tool], *, default_timeout_s: float | None = None
) -> tuple[ToolResult, bool]:
    """Run one call; returns the result shown to the model and whether it succeeded."""

    def fail(message: str) -> tuple[ToolResult, bool]:
        return ToolResult(tool_call_id=call.id, tool_name=call.name, content=f"Error: {message}"), False

    t = tools.get(call.name)
    if t is None:
        return fail(f"tool {call.name!r} not found; available tools: {sorted(tools)}")
    args, problem = _bind_arguments(t, call.arguments)
    if args is None:
        return fail(f"tool {call.name!r}: {problem}")
    timeout = t.timeout_s if t.timeout_s is not None else default_timeout_s
    try:
        if t.is_async:
            value = await asyncio.wait_for(t.fn(**args), timeout)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(t.fn, **args), timeout)
    except TimeoutError:
        return fail(f"tool {call.name!r} timed out after {timeout} s")
    except Exception as exc:
        return fail(f"tool {call.name!r} raised {type(exc).__name__}: {exc}")
    return ToolResult(tool_call_id=call.id, tool_name=call.name, content=_format_result(value)), True


TOOLS: Registry[Any] = Registry("tool", "ludic.tools")
"""Tool name -> a callable taking no arguments and returning its :class:`Tool`."""


def registered_tool(name: str) -> Tool:
    """The registered tool ``name``; an unknown one is a ConfigError naming the registered tools."""
    return TOOLS.build_checked(Tool, name, field="tool")
