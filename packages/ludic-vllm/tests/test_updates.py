"""The update flow end to end without vLLM: publishers → HTTP → LudicRoutes → UpdateService → a fake
engine whose workers run the real LudicWorkerExtension over real Gloo and real files."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import torch

from ludic_core.errors import DataError, LudicTimeoutError, TransportError
from ludic_vllm._net import is_loopback
from ludic_vllm.control import ServerControl
from ludic_vllm.errors import UpdateRejectedError
from ludic_vllm.publisher import FilePublisher, GlooPublisher, PublishSettings, Rank0OnlyPublisher
from ludic_vllm.update_wire import Manifest, TensorSpec


def weights(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(50, 8, generator=gen),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=gen),
        "model.norm.weight": torch.randn(8, generator=gen).to(torch.bfloat16),
        "lm_head.weight": torch.randn(50, 8, generator=gen),
    }


def assert_loaded(fake_server: Any, expected: dict[str, torch.Tensor]) -> None:
    got = fake_server.worker.weights
    assert set(got) == set(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


async def test_gloo_publish_applies_in_order_and_confirms(fake_server: Any) -> None:
    publisher = GlooPublisher(
        fake_server.url, connect_timeout_s=30, bucket_bytes=600, settings=PublishSettings(timeout_s=30)
    )
    try:
        await publisher.publish(weights(1), version=1)
        assert_loaded(fake_server, weights(1))
        calls = fake_server.engine.calls
        update = calls[calls.index("pause:keep") :]
        assert update == ["pause:keep", "ludic_receive", "ludic_set_version", "reset_prefix_cache", "resume"]
        assert fake_server.worker.ludic_get_version() == 1
        # PEFT/DDP names are normalised to checkpoint names before they travel.
        wrapped = {
            f"base_model.model.{k}".replace("q_proj.weight", "q_proj.base_layer.weight"): v
            for k, v in weights(2).items()
        }
        await publisher.publish(wrapped, version=2)
        assert_loaded(fake_server, weights(2))
        n_rpcs = fake_server.engine.calls.count("ludic_receive")
        await publisher.publish(weights(2), version=2)  # same update id: nothing is sent again
        assert fake_server.engine.calls.count("ludic_receive") == n_rpcs
    finally:
        await publisher.aclose()
    assert "ludic_close_transport" in fake_server.engine.calls


async def test_failed_load_leaves_version_resumed_and_reconnects(fake_server: Any) -> None:
    publisher = GlooPublisher(
        fake_server.url, connect_timeout_s=30, bucket_bytes=600, settings=PublishSettings(timeout_s=30)
    )
    try:
        await publisher.publish(weights(1), version=1)
        fake_server.worker.fail_after = 1
        with pytest.raises(TransportError, match="unknown parameter"):
            await publisher.publish(weights(2), version=2)
        assert not publisher.connected
        assert fake_server.worker.ludic_get_version() == 1
        async with ServerControl(fake_server.url) as control:
            assert await control.version() == 1
            assert not await control.is_paused()
        fake_server.worker.fail_after = None
        await publisher.publish(weights(3), version=3)  # a fresh channel
        assert_loaded(fake_server, weights(3))
    finally:
        await publisher.aclose()


async def test_publish_raises_within_its_timeout_when_the_server_stalls(fake_server: Any) -> None:
    publisher = GlooPublisher(fake_server.url, connect_timeout_s=30, settings=PublishSettings(timeout_s=1.0))
    try:
        await publisher.connect()
        fake_server.worker.stall_s = 3.0
        # The deadline (timeout_s=1), not the end of the stall, raised: the message says so.
        with pytest.raises(LudicTimeoutError, match=r"still waiting for .* after 1s"):
            await publisher.publish(weights(1), version=1)
        assert not publisher.connected
    finally:
        fake_server.worker.stall_s = 0.0
        await publisher.aclose()


async def test_file_and_upload_publishers(fake_server: Any, tmp_path: Any) -> None:
    files = FilePublisher(fake_server.url, tmp_path, keep_last=1)
    upload = FilePublisher(fake_server.url, mode="upload")
    try:
        await files.publish(weights(1), version=1)
        assert_loaded(fake_server, weights(1))
        await files.publish(weights(2), version=2)
        assert [p.name for p in tmp_path.iterdir()] == ["step_2"]
        await upload.publish(weights(3), version=3)
        assert_loaded(fake_server, weights(3))
        await upload.publish(weights(3), version=3)  # same update id: a no-op
        other_run = FilePublisher(fake_server.url, mode="upload")
        with pytest.raises(TransportError, match="does not increase"):
            await other_run.publish(weights(4), version=3)
        await other_run.aclose()
        reset = FilePublisher(
            fake_server.url, mode="upload", settings=PublishSettings(allow_version_reset=True)
        )
        await reset.publish(weights(4), version=0)
        await reset.aclose()
        assert fake_server.worker.ludic_get_version() == 0
    finally:
        await files.aclose()
        await upload.aclose()


async def test_lora_factors_are_refused_unless_dropped(fake_server: Any) -> None:
    lora = {
        **weights(1),
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight": torch.ones(2, 8),
    }
    publisher = FilePublisher(fake_server.url, mode="upload")
    with pytest.raises(DataError, match="LoRA factor"):
        await publisher.publish(lora, version=1)
    await publisher.aclose()
    dropping = FilePublisher(fake_server.url, mode="upload", settings=PublishSettings(lora="drop"))
    await dropping.publish(lora, version=1)
    await dropping.aclose()
    assert_loaded(fake_server, weights(1))


async def test_update_route_validation_and_idempotency(fake_server: Any, tmp_path: Any) -> None:
    manifest = Manifest(entries=(TensorSpec("w", "float32", (2,)),))
    async with ServerControl(fake_server.url) as control:
        with pytest.raises(UpdateRejectedError, match="no weight transport is open") as info:
            await control.update(update_id="u1", version=1, manifest=manifest, bucket_bytes=64)
        assert info.value.status == 409
        async with aiohttp.ClientSession() as s:
            body = {
                "update_id": "u1",
                "version": 1,
                "manifest": manifest.to_json(),
                "manifest_checksum": "bad",
            }
            async with s.post(f"{fake_server.url}/ludic/update", json=body) as resp:
                assert resp.status == 400 and "manifest_checksum" in (await resp.json())["error"]["message"]
            async with s.post(f"{fake_server.url}/ludic/update_from_path", json={"version": 1}) as resp:
                assert (
                    resp.status == 400
                    and "'update_id' is required" in (await resp.json())["error"]["message"]
                )
            async with s.get(f"{fake_server.url}/ludic/nope") as resp:
                assert resp.status == 404
        path = tmp_path / "w"
        path.mkdir()
        from safetensors.torch import save_file

        save_file({"w": torch.ones(2)}, str(path / "model.safetensors"))
        first = await control.update_from_path(update_id="a", version=5, path=str(path))
        again = await control.update_from_path(update_id="a", version=9, path=str(path))
        assert (first.duplicate, again.duplicate, again.version) == (False, True, 5)
        assert fake_server.engine.calls.count("ludic_load_path") == 1
        assert await control.update_status("a") == 5 and await control.update_status("zzz") is None


async def test_generation_waits_for_an_update_and_is_stamped(fake_server: Any, tmp_path: Any) -> None:
    async def handler(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {
            "choices": [
                {"token_ids": [1], "prompt_token_ids": body["prompt"], "text": "", "finish_reason": "length"}
            ]
        }

    fake_server.completion_handler = handler
    fake_server.worker.stall_s = 0.5
    upload = FilePublisher(fake_server.url, mode="upload")
    publish = asyncio.ensure_future(upload.publish(weights(1), version=1))
    await asyncio.sleep(0.2)  # the update is in progress now
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{fake_server.url}/v1/completions", json={"prompt": [3]}) as resp,
    ):
        assert resp.headers["x-ludic-policy-version-start"] == "1"
        assert resp.headers["x-ludic-policy-version"] == "1"
    await publish
    await upload.aclose()


async def test_weight_routes_need_loopback_or_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import FakeServer  # type: ignore[import-not-found]

    remote = await FakeServer(client_host="203.0.113.5").start(monkeypatch)
    try:
        async with ServerControl(remote.url) as control:
            with pytest.raises(UpdateRejectedError, match="loopback") as info:
                await control.pause("keep")
            assert info.value.status == 403
            assert await control.version() == 0  # reads are open
    finally:
        await remote.stop()
    guarded = await FakeServer(client_host="203.0.113.5", token="t0k").start(monkeypatch)
    try:
        async with ServerControl(guarded.url, api_token="wrong") as control:
            with pytest.raises(UpdateRejectedError, match="Bearer") as info:
                await control.resume()
            assert info.value.status == 401
        async with ServerControl(guarded.url, api_token="t0k") as control:
            await control.pause("abort")
            assert await control.is_paused()
            await control.resume()
    finally:
        await guarded.stop()


async def test_without_a_token_weight_routes_need_the_operator_to_trust_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from conftest import FakeServer  # type: ignore[import-not-found]

    untrusting = await FakeServer(trust_loopback=False).start(monkeypatch)
    try:
        async with ServerControl(untrusting.url) as control:
            with pytest.raises(UpdateRejectedError, match="--ludic-trust-loopback") as info:
                await control.pause("keep")
            assert info.value.status == 403
            assert await control.version() == 0  # reads are open
    finally:
        await untrusting.stop()


async def test_path_loads_are_confined_to_the_load_directories(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from conftest import FakeServer  # type: ignore[import-not-found]
    from safetensors.torch import save_file

    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    for directory in (allowed, outside):
        directory.mkdir()
        save_file({"w": torch.ones(2)}, str(directory / "model.safetensors"))
    (allowed / "escape").symlink_to(outside)
    # A directory inside the load directory whose weights file links to a file outside it.
    (allowed / "linked").mkdir()
    (allowed / "linked" / "model.safetensors").symlink_to(outside / "model.safetensors")
    server = await FakeServer(load_dirs=(str(allowed),)).start(monkeypatch)
    try:
        async with ServerControl(server.url) as control:
            for path, why in (
                (outside, "outside the server's load directories"),
                (allowed / "escape", "resolved"),
                (allowed / "linked", r"linked/model\.safetensors'.*outside the server's load directories"),
                (str(allowed) + "/\x00x", "holding a NUL byte"),
                ("", "empty or holding a NUL byte"),
            ):
                with pytest.raises(UpdateRejectedError, match=why) as info:
                    await control.update_from_path(
                        update_id=f"u-{hash(str(path))}", version=1, path=str(path)
                    )
                assert info.value.status == 400
            assert "ludic_load_path" not in server.engine.calls
            result = await control.update_from_path(update_id="ok", version=1, path=str(allowed))
            assert result.version == 1 and "ludic_load_path" in server.engine.calls
    finally:
        await server.stop()
    closed = await FakeServer(load_dirs=()).start(monkeypatch)
    try:
        async with ServerControl(closed.url) as control:
            with pytest.raises(UpdateRejectedError, match="--ludic-load-dir"):
                await control.update_from_path(update_id="u", version=1, path=str(allowed))
        upload = FilePublisher(closed.url, mode="upload")  # uploads need no load directory
        await upload.publish(weights(3), version=1)
        await upload.aclose()
        assert_loaded(closed, weights(3))
    finally:
        await closed.stop()


def test_loopback_includes_ipv4_mapped_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.10") and is_loopback("::1")
    assert is_loopback("::ffff:127.0.0.1")  # a dual-stack socket's view of an IPv4 loopback caller
    assert not is_loopback("::ffff:10.0.0.1") and not is_loopback("203.0.113.5") and not is_loopback(None)


@pytest.mark.parametrize(
    "header",
    [
        "X-Forwarded-For",
        "Forwarded",
        "X-Real-IP",
        "X-Forwarded-Host",
        "CF-Connecting-IP",
        "True-Client-IP",
        "X-Client-IP",
        "X-Original-Forwarded-For",
        "Via",
    ],
    ids=lambda h: h.lower(),
)
async def test_proxied_requests_are_never_trusted_as_loopback(fake_server: Any, header: str) -> None:
    # The peer is loopback (a proxy on the same host), but the request came from elsewhere.
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{fake_server.url}/ludic/pause", json={"mode": "keep"}, headers={header: "127.0.0.1"}
        ) as resp,
    ):
        assert resp.status == 403
        assert "proxied request" in await resp.text()
    assert not fake_server.engine.paused
    async with ServerControl(fake_server.url) as control:  # the same call, unproxied, is allowed
        await control.pause("keep")
        assert await control.is_paused()


async def test_resume_and_cache_reset_wait_for_an_update_in_progress(fake_server: Any) -> None:
    fake_server.worker.stall_s = 0.5
    upload = FilePublisher(fake_server.url, mode="upload")
    publish = asyncio.ensure_future(upload.publish(weights(1), version=1))
    await asyncio.sleep(0.2)  # the update is loading weights now
    async with ServerControl(fake_server.url) as control:
        await asyncio.gather(control.resume(), control.reset_prefix_cache())
    await publish
    await upload.aclose()
    calls = fake_server.engine.calls
    # Neither route ran inside the update: both come after the update set its new version.
    set_version = calls.index("ludic_set_version")
    assert calls.count("resume") >= 1 and calls.index("resume") > set_version, calls
    assert calls.index("reset_prefix_cache") > set_version, calls


async def test_rank0_only_publisher_publishes_on_rank_zero_only() -> None:
    published: list[int] = []

    class Inner:
        async def publish(self, named_tensors: Any, *, version: int) -> None:
            published.append(version)

        async def aclose(self) -> None:
            published.append(-1)

    other = Rank0OnlyPublisher(Inner, rank=1)
    await other.publish({}, version=1)
    await other.aclose()
    zero = Rank0OnlyPublisher(Inner, rank=0)
    await zero.publish({}, version=2)
    await zero.aclose()
    assert published == [2, -1]


async def test_backend_wiring_builds_client_and_publisher(fake_server: Any, tmp_path: Any) -> None:
    from ludic_core.errors import ConfigError
    from ludic_vllm.backend import VLLMBackendConfig, open_vllm_backend

    backend = await open_vllm_backend(
        VLLMBackendConfig(urls=fake_server.url, transport="files", weights_dir=str(tmp_path))
    )
    try:
        await backend.publisher.publish(weights(1), version=1)
        assert await backend.client.get_policy_version() == 1
        assert_loaded(fake_server, weights(1))
    finally:
        await backend.aclose()
    with pytest.raises(ConfigError, match="transport='files' needs weights_dir"):
        VLLMBackendConfig(urls=(fake_server.url,), transport="files")
    with pytest.raises(
        ConfigError, match=r"VLLMBackendConfig.transport must be one of .* got 'carrier-pigeon'"
    ):
        VLLMBackendConfig(transport="carrier-pigeon")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timeout_s must be a finite number > 0, got 0"):
        VLLMBackendConfig(timeout_s=0)
    with pytest.raises(ConfigError, match="start_server needs the model directory"):
        await open_vllm_backend(VLLMBackendConfig(start_server=True))


def test_backend_config_takes_one_or_several_distinct_server_urls() -> None:
    from ludic_core.client_pool import ClientPool
    from ludic_core.errors import ConfigError
    from ludic_vllm.backend import VLLMBackendConfig, make_publisher, make_sampling_client
    from ludic_vllm.client import VLLMClient

    assert VLLMBackendConfig(urls="http://a:8000").urls == ("http://a:8000",)  # a lone URL is a list of one
    config = VLLMBackendConfig(urls=["http://a:8000", "http://b:8000"])
    assert isinstance(make_sampling_client(config, ("http://a:8000",)), VLLMClient)
    pool = make_sampling_client(config, config.urls)
    assert isinstance(pool, ClientPool) and [c.base_url for c in pool.clients] == list(config.urls)
    assert make_publisher(config, config.urls).servers == list(config.urls)  # every update reaches both
    with pytest.raises(
        ConfigError, match=r"VLLMBackendConfig.urls must list at least one server URL, got \[\]"
    ):
        VLLMBackendConfig(urls=())
    with pytest.raises(ConfigError, match=r"VLLMBackendConfig\.urls: 'a:8000' is not an http"):
        VLLMBackendConfig(urls=("http://b:8000", "a:8000"))
    with pytest.raises(ConfigError, match=r"VLLMBackendConfig\.urls lists 'http://a:8000' more than once"):
        VLLMBackendConfig(urls=("http://a:8000", "http://a:8000"))
    with pytest.raises(ConfigError, match="with start_server = true: the run starts one server"):
        VLLMBackendConfig(urls=("http://a:8000", "http://b:8000"), start_server=True)


@pytest.mark.parametrize("mode", ["upload", "path", "gloo"])
async def test_publishers_keep_the_publisher_contract(fake_server: Any, tmp_path: Any, mode: str) -> None:
    from ludic_core.testing import check_publisher
    from ludic_vllm.client import VLLMClient

    publisher = {
        "upload": lambda: FilePublisher(fake_server.url, mode="upload"),
        "path": lambda: FilePublisher(fake_server.url, tmp_path, keep_last=1),
        "gloo": lambda: GlooPublisher(fake_server.url),
    }[mode]()
    async with VLLMClient(base_url=fake_server.url, model="tiny") as client:
        await check_publisher(publisher, named_tensors=weights(5), versions=(1, 2), version_source=client)
    assert_loaded(fake_server, weights(5))
