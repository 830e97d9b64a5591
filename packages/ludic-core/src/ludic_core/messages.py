"""Chat messages as steps record them: :class:`FrozenMessage`, a message that cannot change, so steps,
contexts and prompts share it instead of copying it; and the model's tool calls and their results in a
backend-neutral form (:class:`ToolCall`, :class:`ToolResult`)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import attrs

__all__ = [
    "FrozenMessage",
    "Message",
    "ToolCall",
    "ToolResult",
    "freeze_message",
    "freeze_messages",
    "to_tool_calls",
    "to_tool_results",
]

Message: TypeAlias = dict[str, Any]
"""An OpenAI-style chat message: ``role``, ``content``; assistant messages may carry ``tool_calls``
(OpenAI format), tool messages ``tool_call_id`` and ``name``."""


class FrozenMessage(dict[str, Any]):
    """A chat message that cannot change, so steps, contexts and prompts can share it instead of
    copying it.

    It is a ``dict`` (``m["role"]``, ``json.dumps``, ``==`` with plain dicts all work); every method
    that would change it raises ``TypeError``. Copies are plain, mutable dicts: to edit a message, copy
    it (``dict(m)``, ``copy.copy``, ``copy.deepcopy``). Freezing is shallow: nested values such as
    ``tool_calls`` lists are shared, and nothing in Ludic mutates them.
    """

    __slots__ = ()

    def _refuse(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError(
            f"a recorded message is immutable (role {self.get('role')!r}); copy it with dict(message) "
            "to change it"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle rebuilds dict subclasses item by item through __setitem__; rebuild from a dict instead.
        return (FrozenMessage, (dict(self),))


def freeze_message(message: Message) -> FrozenMessage:
    """``message`` itself when already frozen, else a frozen shallow copy (the one copy it gets)."""
    return message if type(message) is FrozenMessage else FrozenMessage(message)


_ONLY_FROZEN = frozenset({FrozenMessage})


def freeze_messages(values: Iterable[Message]) -> tuple[Message, ...]:
    """``values`` as a tuple of frozen messages: a tuple of them is returned as it is, others are frozen."""
    # Frozen messages are shared: a context that keeps its history frozen hands every prompt to its
    # steps without copying the conversation (once per call, quadratic over an episode). The type
    # check runs in C (a set of the element types), not as a Python loop over the conversation.
    values = tuple(values)  # the same object for a tuple
    if set(map(type, values)) <= _ONLY_FROZEN:
        return values
    return tuple(m if type(m) is FrozenMessage else FrozenMessage(m) for m in values)


@attrs.frozen
class ToolCall:
    """A tool call the model made, in a backend-neutral form (arguments are the raw JSON text)."""

    id: str
    name: str
    arguments: str = "{}"

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        if "function" in data:  # OpenAI format
            fn = data["function"]
            return cls(id=str(data.get("id", "")), name=fn["name"], arguments=fn.get("arguments", "{}"))
        return cls(id=data["id"], name=data["name"], arguments=data.get("arguments", "{}"))


@attrs.frozen
class ToolResult:
    """The output of one tool call, as it is shown to the model."""

    tool_call_id: str
    tool_name: str
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "tool_name": self.tool_name, "content": self.content}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        return cls(tool_call_id=data["tool_call_id"], tool_name=data["tool_name"], content=data["content"])

    def to_message(self) -> Message:
        return {
            "role": "tool",
            "tool_call_id": self.tool_call_id,
            "name": self.tool_name,
            "content": self.content,
        }


def to_tool_calls(values: Iterable[ToolCall | Mapping[str, Any]] | None) -> tuple[ToolCall, ...] | None:
    """attrs converter: tool calls, or their dicts (ours or OpenAI's), to a tuple of :class:`ToolCall`."""
    if values is None:
        return None
    return tuple(v if isinstance(v, ToolCall) else ToolCall.from_dict(v) for v in values)


def to_tool_results(values: Iterable[ToolResult | Mapping[str, Any]] | None) -> tuple[ToolResult, ...] | None:
    """attrs converter: tool results, or their dicts, to a tuple of :class:`ToolResult`."""
    if values is None:
        return None
    return tuple(v if isinstance(v, ToolResult) else ToolResult.from_dict(v) for v in values)
