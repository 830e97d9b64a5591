"""Errors specific to the vLLM backend, all rooted in :mod:`ludic_core.errors`.

A caller can tell "fix your request" (:class:`RequestRejectedError`, a :class:`ConfigError`) from "the
server is unwell, maybe retry later" (:class:`ServerError`, a :class:`TransportError`) and from "the
engine is gone" (:class:`EngineDeadError`).
"""

from __future__ import annotations

from ludic_core.errors import ConfigError, TransportError

__all__ = ["EngineDeadError", "RequestRejectedError", "ServerError", "UpdateRejectedError"]


class ServerError(TransportError):
    """The server answered with an error status; ``status`` and ``body`` say which and why."""

    def __init__(self, message: str, *, status: int, body: str, url: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.url = url


class RequestRejectedError(ServerError, ConfigError):
    """The server refused the request as invalid (HTTP 4xx): e.g. a prompt longer than the model's
    context or a sampling parameter out of range. Retrying the same request cannot succeed."""


class UpdateRejectedError(ServerError, ConfigError):
    """A weight-update request was refused: bad manifest, non-increasing version, missing token."""


class EngineDeadError(ServerError):
    """The vLLM engine died (HTTP 500 carrying ``EngineDeadError``); the server must be restarted."""
