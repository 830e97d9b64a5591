"""Shared test set-up: hub-free environment, and the real vLLM server for ``vllm``-marked tests.

The ``vllm`` tests share one server per session (start-up costs 30–80 s on 2 cores). Set
``LUDIC_VLLM_TEST_SERVER=<url>|<model dir>`` to reuse a server you started yourself (tests only move
its version forward).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")

HAS_VLLM = importlib.util.find_spec("vllm") is not None

SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONWARNINGS": "ignore",
}


def tiny_server_args(*extra: str) -> list[str]:
    return [
        "--served-model-name",
        "tiny",
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--device",
        "cpu",
        "--max-num-seqs",
        "16",
        *extra,
    ]


@attrs.frozen
class LiveServer:
    url: str
    model_dir: Path
    process: object | None = None


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from ludic_vllm.testing import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def _start_live_server(
    tmp_path_factory: pytest.TempPathFactory, model_dir: Path | None
) -> Iterator[LiveServer]:
    """A real vLLM (CPU) server with the Ludic extension on ``model_dir`` (None: a new tiny model)."""
    if not HAS_VLLM:
        pytest.skip("vllm is not installed (run the `vllm` nox session)")
    from ludic_vllm.launch import VLLMServer
    from ludic_vllm.testing import build_tiny_llama

    if model_dir is None:
        model_dir = build_tiny_llama(tmp_path_factory.mktemp("served-tiny"))
    log_path = tmp_path_factory.mktemp("logs") / "vllm-server.log"
    server = VLLMServer(
        str(model_dir),
        tiny_server_args(),
        env=SERVER_ENV,
        log_path=log_path,
        startup_timeout_s=480,
        load_dirs=[tmp_path_factory.getbasetemp()],  # every test's tmp_path lies under it
    )
    server.start()
    try:
        yield LiveServer(url=server.url, model_dir=model_dir, process=server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real vLLM (CPU) server with the Ludic extension for the whole session."""
    reuse = os.environ.get("LUDIC_VLLM_TEST_SERVER")
    if reuse:
        if not HAS_VLLM:
            pytest.skip("vllm is not installed (run the `vllm` nox session)")
        url, model_dir = reuse.split("|", 1)
        yield LiveServer(url=url, model_dir=Path(model_dir))
        return
    yield from _start_live_server(tmp_path_factory, None)


@pytest.fixture(scope="session")
def second_vllm_server(
    vllm_server: LiveServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A second server on the first one's model, started only for the tests that take two servers
    (another 30–80 s of start-up)."""
    yield from _start_live_server(tmp_path_factory, vllm_server.model_dir)


# --- a hermetic stand-in for a vLLM server, for the unmarked (fast) tests ------------------------------
#
# What is fake: only vLLM's engine and model. The HTTP layer is a real aiohttp server that hands each
# request to the real LudicRoutes ASGI middleware (so auth, the update service, version stamping and
# error mapping are the shipped code), the engine's collective_rpc calls the real LudicWorkerExtension
# methods in a thread (so transports, manifests and bucketing are the shipped code over real Gloo and
# real files), and "loading" stores the received tensors. /v1/completions is answered by a scripted ASGI
# app that the tests configure.


class FakeParallel:
    tensor_parallel_size = 1
    pipeline_parallel_size = 1
    data_parallel_size = 1
    data_parallel_rank = 0
    world_size_across_dp = 1


class FakeVllmConfig:
    parallel_config = FakeParallel()


def make_fake_worker() -> object:
    import torch

    from ludic_vllm.worker import LudicWorkerExtension

    class FakeWorker(LudicWorkerExtension):
        """A worker whose model is a dict: reload_weights stores what the update streams in."""

        def __init__(self) -> None:
            self.rank = 0
            self.device = torch.device("cpu")
            self.vllm_config = FakeVllmConfig()
            self.weights: dict[str, torch.Tensor] = {}
            self.fail_after: int | None = None
            self.stall_s = 0.0

        def reload_weights(self, weights_iterator: object = None, is_checkpoint_format: bool = True) -> None:
            import time

            if self.stall_s:
                time.sleep(self.stall_s)
            for i, (name, tensor) in enumerate(weights_iterator):  # type: ignore[union-attr]
                if self.fail_after is not None and i >= self.fail_after:
                    raise KeyError(f"unknown parameter {name}")
                self.weights[name] = tensor.clone()

    return FakeWorker()


class FakeEngine:
    """The engine-client surface the Ludic routes use, recording the order of calls."""

    def __init__(self, worker: object) -> None:
        self.worker = worker
        self.vllm_config = FakeVllmConfig()
        self.calls: list[str] = []
        self.paused = False
        self.dead = False

    async def collective_rpc(
        self, method: str, timeout: float | None = None, args: tuple = (), kwargs: dict | None = None
    ) -> list[object]:
        import asyncio

        self.calls.append(method)
        result = await asyncio.wait_for(
            asyncio.to_thread(getattr(self.worker, method), *args, **(kwargs or {})), timeout
        )
        return [result]

    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True) -> None:
        self.calls.append(f"pause:{mode}")
        self.paused = True

    async def resume_generation(self) -> None:
        self.calls.append("resume")
        self.paused = False

    async def is_paused(self) -> bool:
        return self.paused

    async def reset_prefix_cache(self) -> bool:
        self.calls.append("reset_prefix_cache")
        return True

    async def check_health(self) -> None:
        if self.dead:
            raise RuntimeError("EngineDeadError: engine core died")


class FakeServer:
    """aiohttp server → LudicRoutes → UpdateService → FakeEngine → LudicWorkerExtension."""

    def __init__(
        self,
        *,
        token: str | None = None,
        client_host: str = "127.0.0.1",
        trust_loopback: bool = True,
        load_dirs: tuple[str, ...] | None = None,
    ) -> None:
        import tempfile

        self.trust_loopback = trust_loopback
        # pytest's tmp_path lives under the system temp dir: path loads from tests are allowed there.
        self.load_dirs = (tempfile.gettempdir(),) if load_dirs is None else load_dirs
        self.worker = make_fake_worker()
        self.engine = FakeEngine(self.worker)
        self.token = token
        self.client_host = client_host
        self.completion_handler: object = None  # async (body: dict) -> (status, dict)
        self.in_flight = 0
        self.max_in_flight = 0
        self.completion_calls = 0
        self.url = ""
        self._runner: object = None

    async def _inner_app(self, scope: dict, receive: object, send: object) -> None:
        import json

        chunks = []
        while True:
            message = await receive()  # type: ignore[operator]
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.loads(b"".join(chunks) or b"{}")
        self.completion_calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            status, payload = await self.completion_handler(body)  # type: ignore[misc,operator]
        finally:
            self.in_flight -= 1
        raw = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )  # type: ignore[operator]
        await send({"type": "http.response.body", "body": raw})  # type: ignore[operator]

    async def start(self, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
        from aiohttp import web

        from ludic_vllm import _compat, routes

        monkeypatch.setattr(_compat, "vllm_version", lambda: "0.0-fake")
        if self.token:
            monkeypatch.setenv(routes.ENV_API_TOKEN, self.token)
        else:
            monkeypatch.delenv(routes.ENV_API_TOKEN, raising=False)
        monkeypatch.setenv(routes.ENV_TRUST_LOOPBACK, "1" if self.trust_loopback else "0")
        monkeypatch.setenv(routes.ENV_LOAD_DIRS, os.pathsep.join(self.load_dirs))
        middleware = routes.LudicRoutes(self._inner_app)
        engine = self.engine

        class State:
            engine_client = engine

        class App:
            state = State()

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            scope = {
                "type": "http",
                "path": request.path,
                "method": request.method,
                "query_string": request.query_string.encode(),
                "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
                "client": (self.client_host, 12345),
                "app": App(),
            }
            sent = False

            async def receive() -> dict:
                nonlocal sent
                if sent:
                    return {"type": "http.disconnect"}
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            response: dict = {}

            async def send(message: dict) -> None:
                if message["type"] == "http.response.start":
                    response["status"] = message["status"]
                    response["headers"] = [(k.decode(), v.decode()) for k, v in message.get("headers", [])]
                else:
                    response["body"] = response.get("body", b"") + message.get("body", b"")

            await middleware(scope, receive, send)
            headers = {k: v for k, v in response["headers"] if k != "content-length"}
            return web.Response(status=response["status"], body=response.get("body", b""), headers=headers)

        app = web.Application(client_max_size=2**30)
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._runner = runner
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()  # type: ignore[attr-defined]
            self._runner = None


@pytest.fixture
async def fake_server(monkeypatch: pytest.MonkeyPatch) -> object:
    server = await FakeServer().start(monkeypatch)
    yield server
    await server.stop()
