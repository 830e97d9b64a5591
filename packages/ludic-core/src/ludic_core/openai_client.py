"""An OpenAI-compatible chat-completions client over aiohttp: a :class:`~ludic_core.message_client.MessageClient`.

It speaks ``POST {base_url}/chat/completions`` to any OpenAI-compatible server, with no torch and no
tokenizer; replies are text only. At most ``max_concurrency`` requests are in flight;
``request_timeout_s`` bounds each call from when it gets a slot, retries and back-off included. 429, 5xx
and dropped connections are retried up to ``max_retries`` times with exponential back-off (a numeric
``Retry-After`` is honoured, capped at ``max_backoff_s``); other 4xx fail at once, quoting the server. The
key comes from ``api_key_env`` (none is sent when unset). ``top_k``, ``min_p``, ``repetition_penalty``
and ``stop_token_ids`` are sent only when not at their defaults, so a hosted API that lacks them rejects
the request rather than ignoring them. aiohttp is imported on the first request.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError
from ludic_core.inference import SamplingParams
from ludic_core.message_client import MessageCompletion
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S
from ludic_core.types import Message
from ludic_core.validation import check_int, check_number

if TYPE_CHECKING:
    import aiohttp

__all__ = ["RETRYABLE_STATUSES", "OpenAIChatClient"]

RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 409, 429, 500, 502, 503, 504})
"""Answers worth retrying: rate limits, timeouts and server-side failures."""

_EXTENSION_FIELDS = ("top_k", "min_p", "repetition_penalty", "stop_token_ids")


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class _RetryableError(Exception):
    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        value = float(headers.get("Retry-After", ""))
    except ValueError:
        return None  # an HTTP date or garbage: fall back to our own back-off
    return value if value >= 0 else None


class OpenAIChatClient:
    """Chat completions against ``base_url`` (e.g. ``http://localhost:8000/v1``) for ``model``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 32,
        request_timeout_s: float = DEFAULT_MODEL_CALL_TIMEOUT_S,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"OpenAIChatClient.base_url must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}"
            )
        if not isinstance(model, str) or not model:
            raise ConfigError(f"OpenAIChatClient.model must be a non-empty str, got {model!r}")
        check_int("OpenAIChatClient.max_concurrency", max_concurrency, 1)
        for name, value in (
            ("request_timeout_s", request_timeout_s),
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
        ):
            check_number(f"OpenAIChatClient.{name}", value, minimum=0, exclusive=True)
        check_int("OpenAIChatClient.max_retries", max_retries, 0)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.max_concurrency = max_concurrency
        self.request_timeout_s = float(request_timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self._semaphore: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"OpenAIChatClient({self.url!r}, model={self.model!r})"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def payload(
        self, messages: Sequence[Message], sampling: SamplingParams, *, seed: int | None = None
    ) -> dict[str, Any]:
        """The JSON body of one request."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": sampling.temperature,
            "max_tokens": sampling.max_tokens,
            "top_p": sampling.top_p,
            "frequency_penalty": sampling.frequency_penalty,
            "presence_penalty": sampling.presence_penalty,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if seed is not None:
            body["seed"] = seed
        changed = sampling.non_default_fields()
        for name in _EXTENSION_FIELDS:
            if name in changed:
                value = changed[name]
                body[name] = list(value) if isinstance(value, tuple) else value
        return body

    async def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            try:
                import aiohttp
            except ImportError as exc:  # a base dependency; absent only in a broken install
                raise ConfigError(
                    "OpenAIChatClient needs aiohttp, a dependency of ludic-core: pip install ludic-core"
                ) from exc
            self._session = aiohttp.ClientSession(headers=self._headers())
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def complete_messages(
        self, messages: Sequence[Message], sampling: SamplingParams, *, seed: int | None = None
    ) -> MessageCompletion:
        if not messages:
            raise ConfigError("OpenAIChatClient.complete_messages needs at least one message")
        body = self.payload(messages, sampling, seed=seed)
        session = await self._ensure_session()
        assert self._semaphore is not None
        async with self._semaphore:
            # The deadline starts once a slot is free: waiting behind other requests is the caller's
            # concurrency choice (bounded by the agent's call timeout), not the server's slowness.
            try:
                async with asyncio.timeout(self.request_timeout_s):
                    return await self._post_with_retries(session, body)
            except TimeoutError as exc:
                raise LudicTimeoutError(
                    f"{self.url} (model {self.model!r}) did not answer within request_timeout_s="
                    f"{self.request_timeout_s} (retries and back-off included)"
                ) from exc

    async def _post_with_retries(
        self, session: aiohttp.ClientSession, body: dict[str, Any]
    ) -> MessageCompletion:
        attempt = 0
        while True:
            try:
                return await self._post_once(session, body)
            except _RetryableError as exc:
                if attempt >= self.max_retries:
                    raise TransportError(
                        f"{self.url} failed after {attempt + 1} attempts (max_retries={self.max_retries}): {exc}"
                    ) from exc
                # Full jitter: concurrent episodes hit by the same 429 do not retry in lock step.
                delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.5, 1.0)
                if exc.retry_after_s is not None:
                    delay = min(self.max_backoff_s, exc.retry_after_s)
                attempt += 1
                await asyncio.sleep(delay)

    async def _post_once(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> MessageCompletion:
        import aiohttp

        try:
            async with session.post(self.url, json=body) as response:
                text = await response.text()
                if response.status in RETRYABLE_STATUSES:
                    raise _RetryableError(
                        f"HTTP {response.status}: {_excerpt(text)}", _retry_after(response.headers)
                    )
                if response.status != 200:
                    raise TransportError(
                        f"{self.url} answered HTTP {response.status} for model {self.model!r}: {_excerpt(text)}"
                    )
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        return self._parse(text)

    def _parse(self, text: str) -> MessageCompletion:
        try:
            data = json.loads(text)
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise TransportError(
                f"{self.url} answered 200 without a chat completion (choices[0].message): {_excerpt(text)}"
            ) from exc
        content = message.get("content") if isinstance(message, Mapping) else None
        if content is not None and not isinstance(content, str):
            raise TransportError(f"{self.url}: choices[0].message.content is not a string: {content!r:.200}")
        usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
        return MessageCompletion(
            text=content or "",
            finish_reason=choice.get("finish_reason"),
            model=data.get("model") if isinstance(data.get("model"), str) else None,
            usage={k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)},
        )
