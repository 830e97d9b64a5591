"""OpenAIChatClient against a real aiohttp server: the request it sends, retries on 429 and 5xx with
Retry-After honoured, immediate failure on other 4xx, and the deadline over the whole request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError
from ludic_core.inference import SamplingParams
from ludic_core.openai_client import OpenAIChatClient

Handler = Callable[[web.Request], Any]
MESSAGES = [{"role": "user", "content": "Say hi."}]


def completion(text: str, finish_reason: str = "stop") -> web.Response:
    return web.json_response(
        {
            "model": "m",
            "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


async def test_sends_messages_sampling_seed_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[dict[str, Any], str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((await request.json(), request.headers.get("Authorization")))
        return completion("hi", "length")

    monkeypatch.setenv("LUDIC_TEST_KEY", "sk-test")
    async with serve(handler) as url, OpenAIChatClient(url, "m", api_key_env="LUDIC_TEST_KEY") as client:
        sampling = SamplingParams(temperature=0.5, max_tokens=7, stop=("</a>",), top_k=5)
        reply = await client.complete_messages(MESSAGES, sampling, seed=11)
    assert (reply.text, reply.finish_reason, reply.usage["completion_tokens"]) == ("hi", "length", 1)
    body, auth = seen[0]
    assert auth == "Bearer sk-test"
    assert body["messages"] == MESSAGES and body["seed"] == 11 and body["stop"] == ["</a>"]
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.5, 7, 5)
    assert "min_p" not in body  # left at its default: not sent, so hosted APIs accept the request


async def test_retries_rate_limits_and_server_errors() -> None:
    statuses = iter([429, 503])

    async def handler(_request: web.Request) -> web.Response:
        status = next(statuses, 200)
        if status != 200:
            return web.Response(status=status, text="busy", headers={"Retry-After": "0"})
        return completion("ok")

    async with serve(handler) as url, OpenAIChatClient(url, "m", max_retries=2, backoff_s=0.01) as client:
        reply = await client.complete_messages(MESSAGES, SamplingParams())
    assert reply.text == "ok"


async def test_gives_up_after_max_retries_and_fails_fast_on_client_errors() -> None:
    calls = {"n": 0}

    async def handler(request: web.Request) -> web.Response:
        calls["n"] += 1
        if (await request.json())["model"] == "bad":
            return web.Response(status=400, text='{"error": "unknown model bad"}')
        return web.Response(status=500, text="boom")

    async with serve(handler) as url:
        async with OpenAIChatClient(url, "m", max_retries=2, backoff_s=0.01) as client:
            with pytest.raises(TransportError, match="after 3 attempts"):
                await client.complete_messages(MESSAGES, SamplingParams())
        assert calls["n"] == 3
        async with OpenAIChatClient(url, "bad", max_retries=2, backoff_s=0.01) as client:
            with pytest.raises(TransportError, match=r"HTTP 400.*unknown model bad"):
                await client.complete_messages(MESSAGES, SamplingParams())
        assert calls["n"] == 4


async def test_deadline_bounds_the_whole_request() -> None:
    async def handler(_request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return completion("late")

    async with serve(handler) as url, OpenAIChatClient(url, "m", request_timeout_s=0.2) as client:
        with pytest.raises(LudicTimeoutError, match=r"request_timeout_s=0\.2"):
            await client.complete_messages(MESSAGES, SamplingParams())


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIChatClient("localhost:8000", "m")
    with pytest.raises(ConfigError, match="max_concurrency must be an int >= 1, got 0"):
        OpenAIChatClient("http://x/v1", "m", max_concurrency=0)
