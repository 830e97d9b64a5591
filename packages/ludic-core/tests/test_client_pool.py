"""ClientPool: several inference servers behind one client, least-busy routing, oldest version."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiohttp import web
from test_openai_client import completion, serve

from ludic_core.client_pool import ClientPool
from ludic_core.errors import ConfigError
from ludic_core.inference import SamplingParams, TokenCompletionRequest
from ludic_core.openai_client import OpenAIChatClient
from ludic_core.testing import SeededChatClient, check_client


def request(seed: int) -> TokenCompletionRequest:
    return TokenCompletionRequest((1, 2, 3), SamplingParams(max_tokens=4), seed=seed)


async def test_requests_spread_over_the_members_and_the_pool_keeps_the_client_contract() -> None:
    members = [SeededChatClient(["a", "b"], latency_s=0.01, policy_version=v) for v in (3, 2, 3)]
    pool = ClientPool(members)
    await asyncio.gather(*(pool.complete_tokens(request(i)) for i in range(30)))
    assert pool.served == [10, 10, 10] and pool.in_flight == [0, 0, 0]
    # A request may be served by any member: the pool answers the oldest weights among them.
    assert await pool.get_policy_version() == 2
    await check_client(pool, prompt_token_ids=[5, 6, 7])


async def test_a_slow_member_gets_less_work() -> None:
    fast, slow = SeededChatClient(["a"], latency_s=0.002), SeededChatClient(["a"], latency_s=0.05)
    pool = ClientPool([fast, slow])
    limit = asyncio.Semaphore(4)  # an engine's concurrency: 4 calls in flight at a time

    async def call(i: int) -> None:
        async with limit:
            await pool.complete_tokens(request(i))

    await asyncio.gather(*(call(i) for i in range(80)))
    assert pool.served[0] > 3 * pool.served[1] > 0, pool.served


async def test_message_level_members_are_real_servers() -> None:
    hits: Counter[str] = Counter()

    def handler(name: str) -> Any:
        async def answer(request: web.Request) -> web.Response:
            hits[name] += 1
            await asyncio.sleep(0.01)
            return completion(f"from {name}")

        return answer

    async with serve(handler("one")) as first, serve(handler("two")) as second:
        pool = ClientPool([OpenAIChatClient(first, "m"), OpenAIChatClient(second, "m")])
        async with pool:
            replies = await asyncio.gather(
                *(
                    pool.complete_messages([{"role": "user", "content": "hi"}], SamplingParams())
                    for _ in range(20)
                )
            )
    assert hits == {"one": 10, "two": 10}
    assert Counter(r.text for r in replies) == {"from one": 10, "from two": 10}


async def test_bad_pools_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least one client"):
        ClientPool([])
    with pytest.raises(ConfigError, match=r"all be token-level ChatClients .* or all MessageClients"):
        ClientPool([SeededChatClient(["a"]), OpenAIChatClient("http://127.0.0.1:1/v1", "m")])
    with pytest.raises(ConfigError, match=r"members \['OpenAIChatClient'\] report no policy version"):
        await ClientPool([OpenAIChatClient("http://127.0.0.1:1/v1", "m")]).get_policy_version()
