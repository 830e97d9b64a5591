"""Context strategies: what the agent remembers and what it shows the model.

A context keeps the full conversation of one episode (``messages``) and decides what the next prompt
shows (``prompt_messages``). Every strategy sees the same events:

* ``reset(system_prompt=...)`` at episode start,
* ``on_env_reset(obs, info)`` / ``on_after_step(obs, info)`` for env observations (or the feedback
  after a parse failure),
* ``add_assistant(message)`` after every model call and ``add_tool_results(results)`` after tools ran.

Writing your own strategy: subclass :class:`ContextStrategy` and override :meth:`prompt_messages`
(a pure view of ``self._messages``; never mutate history there), and, if observations should enter
differently, :meth:`on_env_reset` / :meth:`on_after_step`. For example, a sliding window::

    class LastKTurns(ContextStrategy):
        def __init__(self, k: int, system_prompt: str | None = None) -> None:
            super().__init__(system_prompt=system_prompt)
            self.k = k

        def prompt_messages(self) -> list[Message]:
            system = [m for m in self._messages[:1] if m["role"] == "system"]
            users = [i for i, m in enumerate(self._messages) if m["role"] == "user"]
            start = users[-self.k] if len(users) >= self.k else len(system)
            return copy.deepcopy(system + self._messages[start:])

Within one turn (one ``act`` and its internal tool calls) the agent appends to the prompt it first
rendered instead of asking the strategy again, so prompts extend token for token whatever the
strategy does; a strategy shapes how earlier *turns* are shown.
"""

from __future__ import annotations

import abc
import copy
import re
from collections.abc import Sequence

from ludic_core.errors import ConfigError
from ludic_core.types import FrozenMessage, Info, Message, ToolResult

__all__ = [
    "NAMED_CONTEXTS",
    "ContextStrategy",
    "FullDialog",
    "LatestObservation",
    "TruncatedThinkingContext",
    "named_context",
]

_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _own_copy(message: Message) -> FrozenMessage:
    # The caller keeps its dict (and the lists inside it): the history gets a deep copy, frozen, so
    # prompts and steps can share it; a frozen message is shared as it is. Copies made from the
    # history (messages, prompt_messages) are plain dicts.
    return message if type(message) is FrozenMessage else FrozenMessage(copy.deepcopy(dict(message)))


class ContextStrategy(abc.ABC):
    """Base class: owns the episode's message history."""

    def __init__(self, system_prompt: str | None = None) -> None:
        self._default_system_prompt = system_prompt
        self._messages: list[Message] = []
        self.reset()

    @property
    def default_system_prompt(self) -> str | None:
        return self._default_system_prompt

    @property
    def supports_tools(self) -> bool:
        """Whether tool calls and tool results can live in this context."""
        return True

    @property
    def messages(self) -> list[Message]:
        """A deep copy of the full history (what happened, not what the model is shown), as plain
        mutable dicts."""
        return copy.deepcopy(self._messages)

    def reset(self, *, system_prompt: str | None = None) -> None:
        """Clear the history; start with ``system_prompt`` (or the constructor's) when there is one."""
        self._messages = []
        prompt = system_prompt if system_prompt is not None else self._default_system_prompt
        if prompt is not None:
            self._messages.append(FrozenMessage(role="system", content=prompt))

    def on_env_reset(self, obs: str, info: Info) -> None:
        self.add_user(obs)

    def on_after_step(self, obs: str, info: Info) -> None:
        self.add_user(obs)

    def add_user(self, content: str) -> None:
        if not isinstance(content, str):
            raise ConfigError(f"a user message needs str content, got {type(content).__name__}: {content!r}")
        self._messages.append(FrozenMessage(role="user", content=content))

    def add_assistant(self, message: Message) -> None:
        """Append an assistant message (``content`` and optionally OpenAI-format ``tool_calls``)."""
        if message.get("role") != "assistant":
            raise ConfigError(f"add_assistant needs role 'assistant', got {message.get('role')!r}")
        # _own_copy, spelled out: the agent hands every assistant message over frozen.
        self._messages.append(message if type(message) is FrozenMessage else _own_copy(message))

    def add_tool_results(self, results: Sequence[ToolResult]) -> None:
        for result in results:
            self._messages.append(FrozenMessage(result.to_message()))

    def add_message(self, message: Message) -> None:
        """Append any well-formed message (escape hatch for custom protocols)."""
        role = message.get("role")
        if role not in _ROLES:
            raise ConfigError(f"message role must be one of {sorted(_ROLES)}, got {role!r}")
        self._messages.append(_own_copy(message))

    @abc.abstractmethod
    def prompt_messages(self) -> list[Message]:
        """The messages the next prompt is rendered from (a fresh copy; callers may mutate it)."""

    def prompt_view(self) -> Sequence[Message]:
        """What :meth:`prompt_messages` shows, for a caller that only reads it (the agent renders it
        and records it on the step). A strategy may return its history's frozen messages here instead
        of copies (as a tuple, which the agent records as it is); the default is :meth:`prompt_messages`."""
        return self.prompt_messages()


class FullDialog(ContextStrategy):
    """Shows the whole conversation, unchanged."""

    def prompt_messages(self) -> list[Message]:
        return copy.deepcopy(self._messages)

    def prompt_view(self) -> Sequence[Message]:
        if type(self).prompt_messages is not FullDialog.prompt_messages:
            return self.prompt_messages()  # a subclass shows something else
        # The history is frozen, so the prompt and every step that records it share its messages: one
        # tuple of them per model call, which the agent records as it is (no second copy).
        return tuple(self._messages)


class LatestObservation(ContextStrategy):
    """Shows the system prompt and the latest user message only (the newest observation, or the
    feedback after a parse failure).

    For envs whose observation is the whole state (a board game, a puzzle), earlier turns add nothing
    the model needs: every prompt stays as short as the first, and the policy cannot pick up habits
    from its own earlier replies (such as repeating a cell named in an earlier turn). The full history
    is still kept in ``messages``.
    """

    def prompt_messages(self) -> list[Message]:
        system = [m for m in self._messages[:1] if m["role"] == "system"]
        latest = next((m for m in reversed(self._messages) if m["role"] == "user"), None)
        return copy.deepcopy(system + ([latest] if latest is not None else []))


# Strict form: optional leading whitespace, a think block, then a non-empty answer.
_THINK_THEN_ANSWER = re.compile(r"^(\s*<think>)(.*?)(</think>)(.*\S.*)$", re.IGNORECASE | re.DOTALL)


class TruncatedThinkingContext(ContextStrategy):
    """Keeps the full history, but in the prompt replaces the body of earlier assistant messages'
    ``<think>…</think>`` with ``placeholder``.

    Only assistant messages of the strict form "optional whitespace, ``<think>…</think>``, non-empty
    answer" are rewritten; anything else (a think block alone, broken tags, text before the tag) is
    shown unchanged, as are user, system and tool messages.
    """

    def __init__(self, system_prompt: str | None = None, placeholder: str = "[TRUNCATED]") -> None:
        if not isinstance(placeholder, str):
            raise ConfigError(f"placeholder must be a str, got {placeholder!r}")
        self.placeholder = placeholder
        super().__init__(system_prompt=system_prompt)

    def truncate(self, content: str) -> str:
        match = _THINK_THEN_ANSWER.match(content)
        if match is None:
            return content
        return f"{match.group(1)}{self.placeholder}{match.group(3)}{match.group(4)}"

    def prompt_messages(self) -> list[Message]:
        out = copy.deepcopy(self._messages)
        for message in out:
            if message.get("role") == "assistant" and isinstance(message.get("content"), str):
                message["content"] = self.truncate(message["content"])
        return out


NAMED_CONTEXTS: dict[str, type[ContextStrategy]] = {
    "full_dialog": FullDialog,
    "latest_observation": LatestObservation,
    "truncated_thinking": TruncatedThinkingContext,
}
"""The strategies a run config names by string (an agent's ``context`` option)."""


def named_context(name: str, system_prompt: str | None = None) -> ContextStrategy:
    """A fresh strategy of :data:`NAMED_CONTEXTS` by name, with ``system_prompt``; an unknown name is a
    ``ConfigError`` that lists the known ones."""
    strategy = NAMED_CONTEXTS.get(name) if isinstance(name, str) else None
    if strategy is None:
        raise ConfigError(f"context must be one of {sorted(NAMED_CONTEXTS)}, got {name!r}")
    return strategy(system_prompt=system_prompt)
