"""HTTP plumbing shared by the data-plane client and the control-plane client: retry policy, status
mapping, and a retry loop that retries only what is safe to retry."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import attrs

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError
from ludic_core.logs import get_logger
from ludic_core.validation import int_at_least
from ludic_vllm.errors import EngineDeadError, RequestRejectedError, ServerError

__all__ = ["RETRYABLE_STATUSES", "RetryPolicy", "error_for_status", "retry_transient", "with_deadline"]

log = get_logger("ludic_vllm.http")

T = TypeVar("T")

RETRYABLE_STATUSES: frozenset[int] = frozenset({502, 503, 504})
"""Gateway errors and 503 (vLLM >= 0.33 answers 503 to new requests while paused)."""


def _positive(_i: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"RetryPolicy.{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class RetryPolicy:
    """Exponential backoff with full jitter: attempt ``n`` (0-based) sleeps a uniform draw from
    ``[0, min(max_delay_s, initial_delay_s * 2**n)]``; at most ``max_attempts`` tries and never past
    ``deadline_s`` from the first try."""

    max_attempts: int = attrs.field(default=5, validator=int_at_least(1))
    initial_delay_s: float = attrs.field(default=0.5, validator=_positive)
    max_delay_s: float = attrs.field(default=8.0, validator=_positive)
    deadline_s: float = attrs.field(default=300.0, validator=_positive)

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_delay_s, self.initial_delay_s * (2.0**attempt)))


def _server_message(body: str) -> str:
    """vLLM's error bodies are JSON (``{"error": {"message": ...}}`` or ``{"detail": ...}``)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:2000]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "detail" in data:
            return str(data["detail"])
        if "message" in data:
            return str(data["message"])
    return body.strip()[:2000]


def error_for_status(
    status: int, body: str, url: str, *, rejected: type[ServerError] = RequestRejectedError
) -> ServerError:
    """The error to raise for a non-2xx answer. 4xx → ``rejected`` (a ConfigError: retrying the same
    request cannot help); 500 with EngineDeadError → :class:`EngineDeadError`; else ServerError."""
    message = _server_message(body)
    if 400 <= status < 500:
        return rejected(
            f"{url} rejected the request (HTTP {status}): {message}", status=status, body=body, url=url
        )
    if "EngineDeadError" in body or "EngineDead" in message:
        return EngineDeadError(
            f"the vLLM engine behind {url} is dead (HTTP {status}): {message}; restart the server",
            status=status,
            body=body,
            url=url,
        )
    return ServerError(f"{url} failed (HTTP {status}): {message}", status=status, body=body, url=url)


def is_transient(exc: BaseException) -> bool:
    """Transport failures worth retrying: refused/reset connections and connect timeouts. A read
    timeout is not retried: the request may still be running on the server."""
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return False
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return True  # connect timeouts (ConnectionTimeoutError) and other pre-response timeouts
    return isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError))


async def retry_transient(
    call: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    rng: random.Random,
    what: str,
) -> T:
    """Run ``call`` with retries. ``call`` raises :class:`ServerError` for HTTP errors; those with a
    status in :data:`RETRYABLE_STATUSES` and transient transport errors are retried, everything else
    propagates at once. Transport errors that are not retried become :class:`TransportError` /
    :class:`LudicTimeoutError` naming ``what``."""
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            return await call()
        except ServerError as exc:
            if exc.status not in RETRYABLE_STATUSES:
                raise
            last: BaseException = exc
        except LudicTimeoutError:
            raise  # a request deadline ran out: the request may still be running on the server
        except aiohttp.SocketTimeoutError as exc:
            raise LudicTimeoutError(f"{what}: no response within the read timeout ({exc})") from exc
        except (aiohttp.ClientError, OSError) as exc:
            if not is_transient(exc) and not isinstance(exc, OSError):
                raise TransportError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            last = exc
        attempt += 1
        elapsed = time.monotonic() - start
        if attempt >= policy.max_attempts or elapsed >= policy.deadline_s:
            if isinstance(last, ServerError):
                raise last
            raise TransportError(
                f"{what} failed after {attempt} attempts over {elapsed:.1f}s: {type(last).__name__}: {last}"
            ) from last
        delay = min(policy.delay(attempt - 1, rng), max(0.0, policy.deadline_s - elapsed))
        log.warning("retrying", what=what, attempt=attempt, delay_s=round(delay, 3), error=repr(last))
        await asyncio.sleep(delay)


async def with_deadline(call: Callable[[], Awaitable[T]], *, deadline_s: float, what: str, setting: str) -> T:
    """Run one HTTP exchange under a deadline for the whole of it, answer body included.

    aiohttp's ``sock_read`` timeout restarts on every chunk received, so a server that drips a byte at
    a time would never trip it. An expired deadline raises :class:`LudicTimeoutError` naming ``what``
    and the ``setting`` that bounds it; aiohttp's own (connect) timeouts pass through unchanged, for
    the retry policy to judge.
    """
    deadline = asyncio.timeout(deadline_s)
    try:
        async with deadline:
            return await call()
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        raise LudicTimeoutError(
            f"{what}: no complete answer within {setting}={deadline_s:g} "
            "(a deadline for the whole request, not per read)"
        ) from exc


class SessionHolder:
    """One ``aiohttp.ClientSession`` per event loop, created lazily.

    A session is bound to the loop it was created on; a client reused from another loop (e.g. two
    ``asyncio.run`` calls in a script) gets a fresh session, and the stale one's connector is closed
    synchronously so nothing leaks.
    """

    def __init__(self, make: Callable[[], aiohttp.ClientSession]) -> None:
        self._make = make
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            if self._session is not None and not self._session.closed:
                connector = self._session.connector
                if connector is not None:
                    # The old loop is gone or different: close its sockets without awaiting on it.
                    connector._close()
            self._session = self._make()
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is None or session.closed:
            return
        if self._loop is asyncio.get_running_loop():
            await session.close()
        elif session.connector is not None:
            session.connector._close()
