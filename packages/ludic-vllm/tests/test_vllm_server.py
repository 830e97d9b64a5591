"""End-to-end tests against a real vLLM server (the CPU build) with the Ludic extension.

One server is shared by the module (see ``conftest.vllm_server``); every test sets the weights it
needs and moves the policy version forward relative to the live one, so the tests are order-free.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from ludic_core.errors import LudicTimeoutError, TransportError
from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_vllm.client import VLLMClient
from ludic_vllm.control import ServerControl
from ludic_vllm.errors import RequestRejectedError, UpdateRejectedError
from ludic_vllm.publisher import FilePublisher, GlooPublisher, PublishSettings
from ludic_vllm.testing import (
    char_ids,
    hf_greedy,
    hf_token_logprobs,
    load_hf_model,
    load_state_into,
    perturbed,
    state_dict_copy,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

PROMPT = char_ids("Once upon a time")


@pytest.fixture(scope="module")
def hf_model(vllm_server: Any) -> Any:
    return load_hf_model(vllm_server.model_dir)


@pytest.fixture(scope="module")
def base_weights(hf_model: Any) -> dict[str, Any]:
    return state_dict_copy(hf_model)


@pytest.fixture
async def client(vllm_server: Any) -> Any:
    async with VLLMClient(base_url=vllm_server.url, model="tiny", request_timeout_s=120) as c:
        yield c


async def set_weights(url: str, weights: dict[str, Any]) -> int:
    """Make ``weights`` live under a fresh version (upload route); returns the version."""
    async with ServerControl(url) as control:
        version = await control.version() + 1
    publisher = FilePublisher(url, mode="upload", settings=PublishSettings(timeout_s=60))
    try:
        await publisher.publish(weights, version=version)
    finally:
        await publisher.aclose()
    return version


def request(
    prompt: list[int] = PROMPT,
    *,
    temperature: float = 1.0,
    max_tokens: int = 16,
    seed: int | None = None,
    ignore_eos: bool = True,
) -> TokenCompletionRequest:
    return TokenCompletionRequest(
        prompt_token_ids=prompt,
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens),
        return_=ReturnSpec.for_rl(),
        seed=seed,
        extensions={"vllm": {"ignore_eos": ignore_eos}},
    )


async def test_health_reports_version_and_vllm(client: VLLMClient) -> None:
    health = await client.wait_until_ready(timeout_s=30)
    assert health.status == "ok"
    assert health.vllm_version.startswith("0.")
    assert health.world_size == 1
    assert health.paused is False and health.updating is False
    assert health.policy_version == await client.get_policy_version()


async def test_tokens_and_logprobs_match_transformers(
    vllm_server: Any, client: VLLMClient, hf_model: Any, base_weights: dict[str, Any]
) -> None:
    version = await set_weights(vllm_server.url, base_weights)
    load_state_into(hf_model, base_weights)
    # Greedy: the same tokens as transformers.
    greedy = await client.complete_tokens(request(temperature=0.0, max_tokens=24))
    assert list(greedy.completion_token_ids) == hf_greedy(hf_model, PROMPT, 24)
    assert greedy.prompt_token_ids == tuple(PROMPT)
    assert greedy.finish_reason == "length"
    assert greedy.policy_version == version
    # Sampled at T=0.7: the returned logprobs are the processed ones, log softmax(logits / T).
    for seed in (1, 2, 3):
        sampled = await client.complete_tokens(request(temperature=0.7, max_tokens=24, seed=seed))
        reference = hf_token_logprobs(hf_model, PROMPT, list(sampled.completion_token_ids), 0.7)
        assert sampled.completion_logprobs is not None
        assert sampled.completion_logprobs == pytest.approx(reference, abs=2e-3)


async def test_prompt_logprobs_match_transformers(
    vllm_server: Any, client: VLLMClient, hf_model: Any, base_weights: dict[str, Any]
) -> None:
    await set_weights(vllm_server.url, base_weights)
    load_state_into(hf_model, base_weights)
    sampled = await client.complete_tokens(request(temperature=1.0, max_tokens=8, seed=4))
    full = list(PROMPT) + list(sampled.completion_token_ids)
    # Scored at temperature 1 (how a teacher scores a student's tokens) and at 0.7: prompt logprobs are
    # the plain distribution's either way.
    for temperature in (1.0, 0.7):
        scored = await client.complete_tokens(
            TokenCompletionRequest(
                prompt_token_ids=full,
                sampling=SamplingParams(temperature=temperature, max_tokens=1),
                return_=ReturnSpec(return_prompt_logprobs=True),
                seed=0,
            )
        )
        assert scored.prompt_logprobs is not None and len(scored.prompt_logprobs) == len(full) - 1
        reference = hf_token_logprobs(hf_model, full[:1], full[1:], 1.0)
        assert scored.prompt_logprobs == pytest.approx(reference, abs=2e-3)
    # The completion's tokens, scored as prompt, get the logprobs they were sampled with (T = 1).
    assert sampled.completion_logprobs is not None
    tail = scored.prompt_logprobs[len(PROMPT) - 1 :]
    assert tail == pytest.approx(sampled.completion_logprobs, abs=2e-3)


async def test_stop_token_ids_end_the_completion(client: VLLMClient) -> None:
    first = await client.complete_tokens(request(temperature=0.0, max_tokens=12))
    stop_id = first.completion_token_ids[3]
    req = TokenCompletionRequest(
        prompt_token_ids=PROMPT,
        sampling=SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=(stop_id,)),
        return_=ReturnSpec.for_rl(),
    )
    stopped = await client.complete_tokens(req)
    cut = first.completion_token_ids.index(stop_id)
    assert stopped.finish_reason == "stop"
    assert stopped.completion_token_ids == first.completion_token_ids[: cut + 1]
    assert stopped.info["stop_reason"] == stop_id


async def test_seeded_requests_reproduce(client: VLLMClient) -> None:
    a = await client.complete_tokens(request(seed=11, max_tokens=32))
    b = await client.complete_tokens(request(seed=11, max_tokens=32))
    c = await client.complete_tokens(request(seed=12, max_tokens=32))
    assert a.completion_token_ids == b.completion_token_ids
    assert a.completion_logprobs == pytest.approx(b.completion_logprobs, abs=1e-5)
    assert a.completion_token_ids != c.completion_token_ids


async def test_concurrent_requests_are_bounded_and_independent(vllm_server: Any, client: VLLMClient) -> None:
    seeds = list(range(100, 112))
    sequential = [await client.complete_tokens(request(seed=s, max_tokens=20)) for s in seeds]
    async with VLLMClient(base_url=vllm_server.url, model="tiny", max_concurrency=3) as bounded:
        concurrent = await asyncio.gather(
            *(bounded.complete_tokens(request(seed=s, max_tokens=20)) for s in seeds)
        )
    assert [r.completion_token_ids for r in concurrent] == [r.completion_token_ids for r in sequential]


async def test_invalid_requests_fail_fast_without_retries(
    client: VLLMClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ludic_vllm import _http

    backoffs: list[int] = []  # the attempts a backoff was drawn for: one per retry
    real_delay = _http.RetryPolicy.delay

    def recording_delay(policy: Any, attempt: int, rng: Any) -> float:
        backoffs.append(attempt)
        return real_delay(policy, attempt, rng)

    monkeypatch.setattr(_http.RetryPolicy, "delay", recording_delay)
    too_long = request(prompt=[5] * 600, max_tokens=4)
    with pytest.raises(RequestRejectedError, match="HTTP 400") as info:
        await client.complete_tokens(too_long)
    monkeypatch.undo()
    assert backoffs == [], "a 400 must not be retried with backoff"
    assert "512" in str(info.value)
    bad = TokenCompletionRequest(
        prompt_token_ids=PROMPT,
        sampling=SamplingParams(max_tokens=4),
        extensions={"vllm": {"min_tokens": -3}},
    )
    with pytest.raises(RequestRejectedError, match="min_tokens"):
        await client.complete_tokens(bad)


LONG = 490  # ~0.6 s of generation on 2 cores for one request; several in parallel run longer
# Pausing "mid-flight" is a race against generation on a 2-core machine (the engine can starve the test
# process). Each pause test therefore retries with more parallel requests until a pause landed while
# requests were running, and fails if it never did.
ATTEMPT_SEEDS = [list(range(10, 14)), list(range(20, 28)), list(range(30, 46))]


async def test_pause_keep_freezes_in_flight_requests(client: VLLMClient) -> None:
    for seeds in ATTEMPT_SEEDS:
        tasks = [
            asyncio.ensure_future(client.complete_tokens(request(seed=s, max_tokens=LONG))) for s in seeds
        ]
        await asyncio.sleep(0.05)
        await client.control.pause("keep")
        try:
            assert await client.control.is_paused()
            frozen = [t for t in tasks if not t.done()]
            await asyncio.sleep(0.5)
            assert not any(t.done() for t in frozen), "kept requests must not finish while paused"
        finally:
            await client.control.resume()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        if frozen:
            break
    assert frozen, "no request was in flight when the pause landed, in any attempt"
    assert not await client.control.is_paused()
    references = [await client.complete_tokens(request(seed=s, max_tokens=LONG)) for s in seeds]
    for result, reference in zip(results, references, strict=True):
        assert result.finish_reason == "length"
        assert result.completion_token_ids == reference.completion_token_ids


async def test_pause_abort_returns_partial_or_resubmits(vllm_server: Any) -> None:
    async with (
        VLLMClient(base_url=vllm_server.url, model="tiny", retry_aborted=False) as raw,
        VLLMClient(base_url=vllm_server.url, model="tiny") as retrying,
    ):
        cut: list[Any] = []
        for seeds in ATTEMPT_SEEDS:
            aborted = [
                asyncio.ensure_future(raw.complete_tokens(request(seed=s, max_tokens=LONG))) for s in seeds
            ]
            await asyncio.sleep(0.05)
            await raw.control.pause("abort")
            try:
                # Requests that reach the engine after the pause are queued, not aborted: they can only
                # finish after the resume, so resume before waiting for all of them.
                await asyncio.sleep(0.3)
            finally:
                await raw.control.resume()
            partials = await asyncio.wait_for(asyncio.gather(*aborted), 120)
            cut = [p for p in partials if p.finish_reason == "abort"]
            if cut:
                break
        assert cut, "no request was in flight when the abort landed, in any attempt"
        assert all(len(p.completion_token_ids) < LONG for p in cut)

        retried: list[Any] = []
        for seeds in ATTEMPT_SEEDS:
            tasks = [
                asyncio.ensure_future(retrying.complete_tokens(request(seed=s, max_tokens=LONG)))
                for s in seeds
            ]
            await asyncio.sleep(0.05)
            await retrying.control.pause("abort")
            try:
                await asyncio.sleep(0.3)
            finally:
                await retrying.control.resume()
            full = await asyncio.wait_for(asyncio.gather(*tasks), 120)
            assert all(r.finish_reason == "length" and len(r.completion_token_ids) == LONG for r in full)
            retried = [r for r in full if r.info["attempts"] == 2]
            if retried:
                break
        assert retried, "no aborted request was resubmitted, in any attempt"


async def test_gloo_update_applies_weights_exactly(
    vllm_server: Any, client: VLLMClient, hf_model: Any, base_weights: dict[str, Any]
) -> None:
    new = perturbed(base_weights, seed=21)
    load_state_into(hf_model, new)
    publisher = GlooPublisher(
        vllm_server.url, connect_timeout_s=60, bucket_bytes=256 * 1024, settings=PublishSettings(timeout_s=60)
    )
    try:
        version = await client.get_policy_version() + 1
        await publisher.publish(new, version=version)
        assert await client.get_policy_version() == version
        greedy = await client.complete_tokens(request(temperature=0.0, max_tokens=24))
        assert list(greedy.completion_token_ids) == hf_greedy(hf_model, PROMPT, 24)
        assert (greedy.policy_version_start, greedy.policy_version_end) == (version, version)
        # A second publish reuses the open channel.
        newer = perturbed(base_weights, seed=22)
        load_state_into(hf_model, newer)
        await publisher.publish(newer, version=version + 1)
        greedy = await client.complete_tokens(request(temperature=0.0, max_tokens=24))
        assert list(greedy.completion_token_ids) == hf_greedy(hf_model, PROMPT, 24)
        assert greedy.policy_version == version + 1
    finally:
        await publisher.aclose()


async def until_a_request_runs(url: str, timeout_s: float = 30.0) -> None:
    """Wait until the server's scheduler runs a request (vLLM's ``vllm:num_requests_running`` gauge): a
    fixed sleep is too short on a loaded machine, where the requests reach the engine late."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            async with session.get(f"{url}/metrics") as resp:
                if resp.status != 200:  # a build without metrics: the requests had 50 ms to arrive
                    await asyncio.sleep(0.05)
                    return
                text = await resp.text()
            gauges = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running")]
            if any(float(line.rsplit(" ", 1)[1]) >= 1 for line in gauges):
                return
            await asyncio.sleep(0.01)
    # None seen running (they may all have finished between two polls): the attempt goes on, and the
    # test tries again with more requests.


async def test_update_during_generation_marks_the_sample_mixed(
    vllm_server: Any, client: VLLMClient, base_weights: dict[str, Any]
) -> None:
    mixed: list[Any] = []
    for attempt, seeds in enumerate(ATTEMPT_SEEDS):
        before = await client.get_policy_version()
        tasks = [
            asyncio.ensure_future(client.complete_tokens(request(seed=s, max_tokens=LONG))) for s in seeds
        ]
        await until_a_request_runs(vllm_server.url)
        # Freeze generation first: on a loaded machine the upload can take longer than the requests,
        # which would then all finish under the old weights. Frozen, every request already admitted is
        # still in flight when the update lands. (The update pauses the engine itself too; a second
        # pause of a paused engine is a no-op, and the update's resume or ours lets them finish.)
        await client.control.pause("keep")
        try:
            await set_weights(vllm_server.url, perturbed(base_weights, seed=23 + attempt))
        finally:
            await client.control.resume()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        assert all(r.finish_reason == "length" for r in results)
        # A request that reached the server while the update ran waited for it: it is pure new-version.
        assert all(r.policy_version_start in (before, before + 1) for r in results)
        assert all(r.policy_version_end in (before, before + 1) for r in results)
        mixed = [r for r in results if (r.policy_version_start, r.policy_version_end) == (before, before + 1)]
        if mixed:
            break
    assert mixed, "the update never landed while a request was in flight"
    assert all(r.policy_version is None for r in mixed)  # mixed-policy samples are not labelled pure


async def test_file_updates_apply_weights_exactly(
    vllm_server: Any, client: VLLMClient, hf_model: Any, base_weights: dict[str, Any], tmp_path: Any
) -> None:
    new = perturbed(base_weights, seed=31)
    load_state_into(hf_model, new)
    publisher = FilePublisher(
        vllm_server.url, tmp_path / "steps", keep_last=1, settings=PublishSettings(timeout_s=60)
    )
    try:
        version = await client.get_policy_version() + 1
        await publisher.publish(new, version=version)
        greedy = await client.complete_tokens(request(temperature=0.0, max_tokens=24))
        assert list(greedy.completion_token_ids) == hf_greedy(hf_model, PROMPT, 24)
        assert greedy.policy_version == version == await client.get_policy_version()
        await publisher.publish(perturbed(base_weights, seed=32), version=version + 1)
        assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == [f"step_{version + 1}"]
    finally:
        await publisher.aclose()


async def test_same_update_id_is_a_no_op(
    vllm_server: Any, base_weights: dict[str, Any], tmp_path: Any
) -> None:
    publisher = FilePublisher(vllm_server.url, tmp_path, settings=PublishSettings(timeout_s=60))
    async with ServerControl(vllm_server.url) as control:
        version = await control.version() + 1
        await publisher.publish(perturbed(base_weights, seed=41), version=version)
        step = str(tmp_path / f"step_{version}")
        update_id = publisher.update_id(version)
        again = await control.update_from_path(update_id=update_id, version=version, path=step)
        assert again.duplicate and again.version == version
        # Same id, even with a different claimed version: still the recorded no-op.
        again = await control.update_from_path(update_id=update_id, version=version + 5, path=step)
        assert again.duplicate and again.version == version
        assert await control.version() == version
        assert await control.update_status(update_id) == version
        # A new id that does not move the version forward is refused, not applied.
        with pytest.raises(UpdateRejectedError, match="does not increase"):
            await control.update_from_path(update_id="other", version=version, path=step)
        await publisher.publish(perturbed(base_weights, seed=41), version=version)  # publisher no-op too
        assert await control.version() == version
    await publisher.aclose()


async def test_weight_routes_refuse_non_loopback_callers(vllm_server: Any) -> None:
    # uvicorn trusts X-Forwarded-For from 127.0.0.1: this is how a request relayed by a local reverse
    # proxy from a remote host arrives.
    remote = {"X-Forwarded-For": "203.0.113.9"}
    async with aiohttp.ClientSession() as session:
        for path in ("/ludic/update_from_path", "/ludic/pause", "/ludic/transport/init"):
            async with session.post(f"{vllm_server.url}{path}", json={}, headers=remote) as resp:
                assert resp.status == 403, path
                assert "loopback" in (await resp.json())["error"]["message"]
        async with session.get(f"{vllm_server.url}/ludic/version", headers=remote) as resp:
            assert resp.status == 200  # reads stay open
        async with session.post(f"{vllm_server.url}/ludic/resume", json={}) as resp:
            assert resp.status == 200  # the same route from loopback


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory, vllm_server: Any) -> Any:
    """A second server, with a bearer token and LoRA enabled; the last test of the module kills it."""
    from conftest import SERVER_ENV, tiny_server_args  # type: ignore[import-not-found]

    from ludic_vllm.launch import VLLMServer

    server = VLLMServer(
        str(vllm_server.model_dir),
        tiny_server_args("--enable-lora", "--max-lora-rank", "8", "--max-loras", "1"),
        env=SERVER_ENV,
        api_token="s3cret",
        load_dirs=[tmp_path_factory.getbasetemp()],
        log_path=tmp_path_factory.mktemp("logs") / "token-server.log",
        startup_timeout_s=480,
    )
    server.start()
    yield server
    server.stop()


async def test_lora_adapter_publish_matches_merged_transformers(
    token_server: Any, hf_model: Any, base_weights: dict[str, Any], tmp_path: Any
) -> None:
    import torch

    gen = torch.Generator().manual_seed(0)
    rank, alpha = 8, 16
    adapter: dict[str, Any] = {}
    for layer in range(2):
        for proj in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            adapter[f"{prefix}.lora_A.weight"] = torch.randn(rank, 128, generator=gen) * 0.1
            adapter[f"{prefix}.lora_B.weight"] = torch.randn(128, rank, generator=gen) * 0.1
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "task_type": "CAUSAL_LM",
        "lora_dropout": 0.0,
        "fan_in_fan_out": False,
    }

    def merged(sign: float) -> dict[str, Any]:
        out = dict(base_weights)
        for layer in range(2):
            for proj in ("q_proj", "v_proj"):
                prefix = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
                delta = (
                    (alpha / rank)
                    * (sign * adapter[f"{prefix}.lora_B.weight"])
                    @ adapter[f"{prefix}.lora_A.weight"]
                )
                name = f"model.layers.{layer}.self_attn.{proj}.weight"
                out[name] = base_weights[name] + delta
        return out

    publisher = FilePublisher(
        token_server.url, tmp_path, keep_last=1, settings=PublishSettings(api_token="s3cret")
    )
    try:
        async with VLLMClient(base_url=token_server.url, model="tiny") as client:
            await publisher.publish_adapter("policy", adapter, config, version=1)
            out = await client.complete_tokens(
                attrs_evolve_model(request(temperature=0.0, max_tokens=20), "policy")
            )
            assert list(out.completion_token_ids) == hf_greedy(
                load_state_into(hf_model, merged(1.0)), PROMPT, 20
            )
            assert out.policy_version == 1
            base = await client.complete_tokens(request(temperature=0.0, max_tokens=20))
            assert list(base.completion_token_ids) == hf_greedy(
                load_state_into(hf_model, base_weights), PROMPT, 20
            )
            # Same adapter name, new weights: replaced in place.
            flipped = {k: (-v if "lora_B" in k else v) for k, v in adapter.items()}
            await publisher.publish_adapter("policy", flipped, config, version=2)
            out = await client.complete_tokens(
                attrs_evolve_model(request(temperature=0.0, max_tokens=20), "policy")
            )
            assert list(out.completion_token_ids) == hf_greedy(
                load_state_into(hf_model, merged(-1.0)), PROMPT, 20
            )
            assert out.policy_version == 2
    finally:
        await publisher.aclose()


def attrs_evolve_model(req: TokenCompletionRequest, model: str) -> TokenCompletionRequest:
    import attrs

    return attrs.evolve(req, model=model)


async def test_token_server_requires_the_token_and_publish_fails_fast_when_it_dies(
    token_server: Any, base_weights: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ServerControl(token_server.url) as anonymous:
        with pytest.raises(UpdateRejectedError, match="HTTP 401"):
            await anonymous.pause("keep")
    async with ServerControl(token_server.url, api_token="s3cret") as control:
        await control.pause("keep")
        await control.resume()

    import ludic_vllm.publisher.broadcast as broadcast

    mid_transfer = asyncio.Event()
    loop = asyncio.get_running_loop()
    real_send = broadcast.send_manifest

    def send_then_stall(group: Any, manifest: Any, tensors: Any, **kw: Any) -> None:
        # Send the first bucket, then let the test kill the server before sending the rest.
        first = {manifest.entries[0].name}
        calls = {"n": 0}

        def stop() -> bool:
            calls["n"] += 1
            if calls["n"] == 2:
                loop.call_soon_threadsafe(mid_transfer.set)
                time.sleep(2.0)
            return False

        assert first
        real_send(group, manifest, tensors, bucket_bytes=kw["bucket_bytes"], should_stop=stop)

    monkeypatch.setattr(broadcast, "send_manifest", send_then_stall)
    publisher = GlooPublisher(
        token_server.url,
        connect_timeout_s=60,
        bucket_bytes=64 * 1024,
        settings=PublishSettings(api_token="s3cret", timeout_s=20),
    )
    try:
        await publisher.connect()
        version = await publisher.controls[0].version() + 1
        publish = asyncio.ensure_future(publisher.publish(perturbed(base_weights, seed=51), version=version))
        await asyncio.wait_for(mid_transfer.wait(), 30)
        token_server.stop()  # SIGTERM → SIGKILL to the server's process group, mid-transfer
        # publish must raise within its own timeout (20 s); past 60 s wait_for's TimeoutError fails this.
        with pytest.raises((TransportError, LudicTimeoutError)):
            await asyncio.wait_for(publish, 60)
        assert not publisher.connected
    finally:
        await publisher.aclose()
