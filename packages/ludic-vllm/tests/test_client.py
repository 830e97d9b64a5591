"""VLLMClient against the hermetic fake server (real HTTP, real Ludic routes; scripted completions)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ludic_core.errors import ConfigError, LudicTimeoutError, ProtocolError, TransportError
from ludic_core.inference import (
    ChatClient,
    ReturnSpec,
    SamplingParams,
    TokenCompletionRequest,
    VersionedClient,
)
from ludic_vllm._http import RetryPolicy
from ludic_vllm.client import VLLMClient, parse_prompt_logprobs
from ludic_vllm.errors import EngineDeadError, RequestRejectedError, ServerError

FAST_RETRY = RetryPolicy(max_attempts=4, initial_delay_s=0.01, max_delay_s=0.02, deadline_s=5.0)


def completion(
    body: dict[str, Any], ids: list[int], *, finish: str = "length", logprobs: bool = True
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "text": "".join(chr(i + 29) for i in ids),
        "token_ids": ids,
        "prompt_token_ids": body["prompt"],
        "finish_reason": finish,
        "stop_reason": None,
    }
    if logprobs:
        choice["logprobs"] = {"token_logprobs": [-0.5 - i / 100 for i in range(len(ids))]}
    return {"id": "cmpl-1", "choices": [choice], "usage": {"completion_tokens": len(ids)}}


def req(**kw: Any) -> TokenCompletionRequest:
    return TokenCompletionRequest(
        prompt_token_ids=kw.pop("prompt", [5, 6, 7]),
        sampling=kw.pop("sampling", SamplingParams(temperature=0.7, max_tokens=3, stop_token_ids=(2,))),
        return_=kw.pop("return_", ReturnSpec.for_rl()),
        **kw,
    )


@pytest.fixture
async def client(fake_server: Any) -> Any:
    async with VLLMClient(base_url=fake_server.url, model="tiny", retry=FAST_RETRY, seed=0) as c:
        yield c


def test_implements_the_core_contracts() -> None:
    c = VLLMClient(base_url="http://127.0.0.1:9")
    assert isinstance(c, ChatClient) and isinstance(c, VersionedClient)


async def test_sends_token_ids_and_parses_ids_logprobs_and_versions(
    fake_server: Any, client: VLLMClient
) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        seen.append(body)
        return 200, completion(body, [40, 41, 42])

    fake_server.completion_handler = handler
    fake_server.worker.ludic_set_version(0)
    response = await client.complete_tokens(
        req(seed=9, extensions={"vllm": {"cache_salt": "s", "extra_body": {"x": 1}}})
    )
    body = seen[0]
    assert body["prompt"] == [5, 6, 7] and body["model"] == "tiny"
    assert body["seed"] == 9 and body["logprobs"] == 1 and body["stop_token_ids"] == [2]
    assert body["return_token_ids"] is True and body["n"] == 1 and body["top_k"] == -1
    assert body["cache_salt"] == "s" and body["x"] == 1
    assert response.completion_token_ids == (40, 41, 42)
    assert response.completion_logprobs == pytest.approx((-0.5, -0.51, -0.52))
    assert response.finish_reason == "length"
    assert (response.policy_version_start, response.policy_version_end) == (0, 0)
    assert "prompt" not in str(response.info)  # no prompt ids bloating step info


async def test_unknown_extension_keys_are_rejected(client: VLLMClient) -> None:
    with pytest.raises(ConfigError, match="unknown keys"):
        await client.complete_tokens(req(extensions={"vllm": {"max_thinkk": 3}}))


async def test_retries_gateway_errors_then_succeeds(fake_server: Any, client: VLLMClient) -> None:
    calls = {"n": 0}

    async def handler(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        calls["n"] += 1
        if calls["n"] <= 2:
            return 503, {"error": {"message": "paused"}}
        return 200, completion(body, [9])

    fake_server.completion_handler = handler
    response = await client.complete_tokens(req())
    assert calls["n"] == 3 and response.completion_token_ids == (9,)


async def test_client_errors_and_engine_death_are_not_retried(fake_server: Any, client: VLLMClient) -> None:
    async def bad_request(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 400, {"error": {"message": "This model's maximum context length is 512 tokens"}}

    fake_server.completion_handler = bad_request
    with pytest.raises(RequestRejectedError, match="maximum context length") as info:
        await client.complete_tokens(req())
    assert isinstance(info.value, ConfigError) and info.value.status == 400
    assert fake_server.completion_calls == 1

    async def dead(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 500, {"error": {"message": "EngineDeadError: EngineCore encountered an issue"}}

    fake_server.completion_handler = dead
    with pytest.raises(EngineDeadError):
        await client.complete_tokens(req())
    assert fake_server.completion_calls == 2

    async def plain_500(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 500, {"error": {"message": "boom"}}

    fake_server.completion_handler = plain_500
    with pytest.raises(ServerError, match="boom"):
        await client.complete_tokens(req())
    assert fake_server.completion_calls == 3


async def test_aborted_completions_are_resubmitted_or_returned(fake_server: Any) -> None:
    calls = {"n": 0}

    async def handler(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        calls["n"] += 1
        return 200, completion(
            body, [1] if calls["n"] == 1 else [1, 2, 3], finish="abort" if calls["n"] == 1 else "length"
        )

    fake_server.completion_handler = handler
    async with VLLMClient(base_url=fake_server.url, model="tiny", retry=FAST_RETRY) as c:
        response = await c.complete_tokens(req())
    assert response.finish_reason == "length" and response.info["attempts"] == 2
    calls["n"] = 0
    async with VLLMClient(base_url=fake_server.url, model="tiny", retry=FAST_RETRY, retry_aborted=False) as c:
        response = await c.complete_tokens(req())
    assert response.finish_reason == "abort" and response.completion_token_ids == (1,)


async def test_malformed_responses_raise_protocol_errors(fake_server: Any, client: VLLMClient) -> None:
    async def short_logprobs(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = completion(body, [1, 2, 3])
        data["choices"][0]["logprobs"]["token_logprobs"] = [-1.0]
        return 200, data

    fake_server.completion_handler = short_logprobs
    with pytest.raises(ProtocolError, match="1 logprobs for 3"):
        await client.complete_tokens(req())

    async def changed_prompt(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = completion(body, [1])
        data["choices"][0]["prompt_token_ids"] = [1, *body["prompt"]]
        return 200, data

    fake_server.completion_handler = changed_prompt
    with pytest.raises(ProtocolError, match="changed the prompt"):
        await client.complete_tokens(req())


def vllm_prompt_logprobs(prompt: list[int], key: str = "{}") -> list[Any]:
    """``choices[0].prompt_logprobs`` as vLLM writes it for ``prompt_logprobs: 0``."""
    return [None] + [
        {key.format(t): {"logprob": -1.0 - p / 10, "rank": 3, "decoded_token": "x"}}
        for p, t in enumerate(prompt[1:], start=1)
    ]


async def test_prompt_logprobs_are_requested_and_parsed(fake_server: Any, client: VLLMClient) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        seen.append(body)
        data = completion(body, [40], logprobs="logprobs" in body)
        if "prompt_logprobs" in body:
            data["choices"][0]["prompt_logprobs"] = vllm_prompt_logprobs(body["prompt"])
        return 200, data

    fake_server.completion_handler = handler
    scoring = req(
        prompt=[5, 6, 7, 8],
        sampling=SamplingParams(temperature=1.0, max_tokens=1),
        return_=ReturnSpec(return_prompt_logprobs=True),
    )
    response = await client.complete_tokens(scoring)
    assert seen[-1]["prompt_logprobs"] == 0 and "logprobs" not in seen[-1]
    assert response.prompt_logprobs == pytest.approx((-1.1, -1.2, -1.3))
    assert response.completion_logprobs is None
    plain = await client.complete_tokens(req())
    assert "prompt_logprobs" not in seen[-1] and plain.prompt_logprobs is None


def test_parse_prompt_logprobs_reads_the_prompt_tokens_entries() -> None:
    prompt = [11, 12, 13]
    assert parse_prompt_logprobs(vllm_prompt_logprobs(prompt), prompt) == pytest.approx([-1.1, -1.2])
    keyed = vllm_prompt_logprobs(prompt, key="token_id:{}")
    assert parse_prompt_logprobs(keyed, prompt) == pytest.approx([-1.1, -1.2])
    # With alternatives (prompt_logprobs: k > 0) the prompt token's own entry is the one read.
    wide = vllm_prompt_logprobs(prompt)
    wide[2] = {"99": {"logprob": -0.01}, "13": {"logprob": -4.0}}
    assert parse_prompt_logprobs(wide, prompt) == pytest.approx([-1.1, -4.0])
    assert parse_prompt_logprobs([None], [11]) == []
    with pytest.raises(ProtocolError, match="prompt_logprobs is missing"):
        parse_prompt_logprobs(None, prompt)
    with pytest.raises(ProtocolError, match="2 entries for a 3-token prompt"):
        parse_prompt_logprobs(vllm_prompt_logprobs(prompt)[:2], prompt)
    wrong_token = vllm_prompt_logprobs(prompt)
    wrong_token[1] = {"99": {"logprob": -0.5}}
    with pytest.raises(ProtocolError, match=r"prompt_logprobs\[1\] has no logprob for prompt token 12"):
        parse_prompt_logprobs(wrong_token, prompt)
    null_value = vllm_prompt_logprobs(prompt)
    null_value[2] = {"13": {"logprob": None}}
    with pytest.raises(ProtocolError, match=r"prompt_logprobs\[2\] has no logprob for prompt token 13"):
        parse_prompt_logprobs(null_value, prompt)


async def test_missing_prompt_logprobs_are_a_protocol_error(fake_server: Any, client: VLLMClient) -> None:
    async def handler(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, completion(body, [40], logprobs=False)

    fake_server.completion_handler = handler
    with pytest.raises(ProtocolError, match="prompt_logprobs is missing"):
        await client.complete_tokens(req(return_=ReturnSpec(return_prompt_logprobs=True)))


async def test_concurrency_is_bounded(fake_server: Any) -> None:
    async def slow(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        await asyncio.sleep(0.05)
        return 200, completion(body, [3])

    fake_server.completion_handler = slow
    async with VLLMClient(base_url=fake_server.url, model="tiny", max_concurrency=2) as c:
        results = await asyncio.gather(*(c.complete_tokens(req(seed=i)) for i in range(8)))
    assert len(results) == 8
    assert fake_server.max_in_flight == 2


async def test_read_timeout_raises_a_timeout_naming_the_wait(fake_server: Any) -> None:
    async def hang(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        await asyncio.sleep(1.5)
        return 200, completion(body, [3])

    fake_server.completion_handler = hang
    async with VLLMClient(base_url=fake_server.url, model="tiny", request_timeout_s=0.3) as c:
        with pytest.raises(LudicTimeoutError, match=r"request_timeout_s=0\.3"):
            await c.complete_tokens(req())
    assert fake_server.completion_calls == 1  # a read timeout is not retried


async def test_unreachable_server_fails_after_bounded_retries() -> None:
    from ludic_vllm.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"
    async with VLLMClient(base_url=url, model="tiny", retry=FAST_RETRY) as c:
        with pytest.raises(TransportError, match="after 4 attempts"):
            await c.complete_tokens(req())
        with pytest.raises(TransportError):
            await c.get_policy_version()  # never a default version
        with pytest.raises(LudicTimeoutError, match="not ready within"):
            await c.control.wait_until_ready(timeout_s=0.3, poll_s=0.1)


async def test_versions_and_health_come_from_the_server(fake_server: Any, client: VLLMClient) -> None:
    health = await client.wait_until_ready(timeout_s=5)
    assert health.status == "ok" and health.policy_version == 0 and health.world_size == 1
    assert await client.get_policy_version() == 0
    fake_server.engine.dead = True
    with pytest.raises(ServerError, match="503"):
        await client.health()


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        VLLMClient(base_url="127.0.0.1:8000")
    with pytest.raises(ConfigError, match="max_concurrency"):
        VLLMClient(max_concurrency=0)
    with pytest.raises(ConfigError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
