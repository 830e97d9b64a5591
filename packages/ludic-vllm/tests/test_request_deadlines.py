"""Every HTTP wait is bounded as a whole: a server that answers one byte at a time still times out.

aiohttp's ``sock_read`` timeout restarts on every byte received, so a dripping server would keep a
request alive for as long as it drips. These tests run a real aiohttp server on loopback that sends
its answer a byte every 50 ms, for far longer than the caller's timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from ludic_core.errors import LudicTimeoutError
from ludic_core.inference import TokenCompletionRequest
from ludic_vllm._http import RetryPolicy
from ludic_vllm.client import VLLMClient
from ludic_vllm.control import ServerControl

DRIP_INTERVAL_S = 0.05
DRIP_BYTES = 400  # 20 s of dripping: far past every timeout below


class DripServer:
    def __init__(self) -> None:
        self.calls = 0
        self.completed = 0  # answers dripped to their end
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def drip(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            for _ in range(DRIP_BYTES):
                await response.write(b" ")
                await asyncio.sleep(DRIP_INTERVAL_S)
            await response.write(b"{}")
            self.completed += 1
        except ConnectionResetError:
            pass  # the caller gave up, as it should
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.drip)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def drip_server() -> AsyncIterator[DripServer]:
    server = DripServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.mark.parametrize("call", ["health", "version"])
async def test_control_calls_time_out_on_a_dripping_server(drip_server: DripServer, call: str) -> None:
    retry = RetryPolicy(max_attempts=3, initial_delay_s=0.01, max_delay_s=0.02, deadline_s=5.0)
    async with ServerControl(drip_server.url, timeout_s=0.5, retry=retry) as control:
        with pytest.raises(
            LudicTimeoutError, match=r"within timeout_s=0\.5 \(a deadline for the whole request"
        ):
            await getattr(control, call)()
    assert drip_server.completed == 0, f"{call} waited for the whole drip"
    # An expired deadline is not retried, even for idempotent calls: the server may still be working.
    assert drip_server.calls == 1


async def test_completions_and_model_listing_time_out_on_a_dripping_server(drip_server: DripServer) -> None:
    async with VLLMClient(
        base_url=drip_server.url, model="tiny", request_timeout_s=0.5, control_timeout_s=0.5
    ) as client:
        with pytest.raises(LudicTimeoutError, match=r"within request_timeout_s=0\.5"):
            await client.complete_tokens(TokenCompletionRequest(prompt_token_ids=(1, 2, 3)))
    async with VLLMClient(base_url=drip_server.url, control_timeout_s=0.5) as client:
        with pytest.raises(
            LudicTimeoutError, match=r"/v1/models: no complete answer within control_timeout_s=0\.5"
        ):
            await client.model_name()
    assert drip_server.calls == 2  # neither expired deadline was retried
    assert drip_server.completed == 0  # each gave up while its answer was still dripping
