"""The one logging path of every Ludic package: structlog call sites, stdlib ``logging`` records.

``get_logger(__name__).warning("engine.episode_failed", episode=3)`` becomes one :mod:`logging` record on
a logger under ``ludic`` (``ludic_core.engine`` -> ``ludic.core.engine``), its message the event name and
its key-value pairs, its fields on ``record.event_dict``. Nothing here configures logging (neither the
stdlib's nor structlog's, which is process-global): the application sets levels and handlers, and with
none, only warnings and errors reach stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

__all__ = ["ROOT_LOGGER_NAME", "LudicBoundLogger", "get_logger", "stdlib_logger_name"]

ROOT_LOGGER_NAME = "ludic"

# structlog method name -> stdlib level; "exception" logs at ERROR (with the traceback).
_METHOD_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}

# Keyword arguments the stdlib logger takes itself instead of rendering them into the message.
_STDLIB_KWARGS = ("exc_info", "stack_info")

# Frames of these modules sit between a call site and the stdlib logger; the record's file, line and
# function must name the caller, not them.
_WRAPPER_MODULES = ("structlog", __name__)


def stdlib_logger_name(name: str) -> str:
    """The stdlib logger name for a module name: ``ludic_core.engine`` -> ``ludic.core.engine``.

    Names already under ``ludic`` are kept; any other name is put under it (``x.y`` -> ``ludic.x.y``),
    so that the ``ludic`` logger's level and handlers govern everything logged through this module.
    """
    if name == ROOT_LOGGER_NAME or name.startswith(ROOT_LOGGER_NAME + "."):
        return name
    if name.startswith(ROOT_LOGGER_NAME + "_"):
        return f"{ROOT_LOGGER_NAME}.{name[len(ROOT_LOGGER_NAME) + 1 :]}"
    return f"{ROOT_LOGGER_NAME}.{name}"


def _format_value(value: object) -> str:
    # Strings without whitespace stay bare (error=ValueError('boom') reads and greps well); the rest is
    # repr()'d, so whitespace inside a value is always quoted and never looks like the next field.
    if isinstance(value, str) and value and not any(c.isspace() for c in value):
        return value
    return repr(value)


def _render_message(event: object, fields: Mapping[str, Any]) -> str:
    """``event key=value ...`` in the order the fields were given."""
    parts = [str(event)] if event is not None else []
    parts.extend(f"{key}={_format_value(value)}" for key, value in fields.items())
    return " ".join(parts)


def _to_stdlib_call(
    logger: WrappedLogger, method_name: str, event_dict: EventDict
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Final processor: the ``(args, kwargs)`` for the stdlib logger method."""
    kwargs: dict[str, Any] = {}
    for key in _STDLIB_KWARGS:
        if key in event_dict:
            kwargs[key] = event_dict.pop(key)
    fields = {key: value for key, value in event_dict.items() if key != "event"}
    # The message is rendered here, so no stdlib "%" formatting may run on it: no positional args.
    kwargs["extra"] = {"event_dict": dict(event_dict)}
    return (_render_message(event_dict.get("event"), fields),), kwargs


_PROCESSORS: tuple[Any, ...] = (
    # log.info("loaded %d rows", n) works as it does with the stdlib.
    structlog.stdlib.PositionalArgumentsFormatter(),
    _to_stdlib_call,
)


def _caller_stacklevel() -> int:
    """The stdlib ``stacklevel`` that makes a record name the code that called the bound logger.

    The stdlib skips its own frames and then counts ``stacklevel`` frames outward, starting with the
    frame that calls its logger method: the caller of this function, which must be a wrapper frame.
    """
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_WRAPPER_MODULES):
        frame = frame.f_back
        level += 1
    return level


class LudicBoundLogger(structlog.stdlib.BoundLogger):
    """A structlog stdlib ``BoundLogger`` that drops events below the stdlib logger's effective level
    before any processor runs.

    A disabled ``log.debug(...)`` thus costs one method call and a cached level lookup: no event dict
    is built and nothing is rendered.
    """

    def _proxy_to_logger(
        self,
        method_name: str,
        event: str | None = None,
        *event_args: str,
        **event_kw: Any,
    ) -> Any:
        logger: logging.Logger = self._logger
        if not logger.isEnabledFor(_METHOD_LEVELS.get(method_name, logging.NOTSET)):
            return None
        if event_args:
            event_kw["positional_args"] = event_args
        try:
            args, kwargs = self._process_event(method_name, event, event_kw)
        except structlog.DropEvent:
            return None
        return getattr(logger, method_name)(*args, stacklevel=_caller_stacklevel(), **kwargs)


def get_logger(name: str) -> LudicBoundLogger:
    """A structlog logger for ``name`` (normally ``__name__``) writing to the stdlib logger
    ``stdlib_logger_name(name)``.

    Built directly rather than through ``structlog.get_logger``: that one follows the process-global
    structlog configuration, which is the application's to set (and which, left unset, prints to
    stdout).
    """
    return LudicBoundLogger(logging.getLogger(stdlib_logger_name(name)), _PROCESSORS, {})
