"""pytest fixtures for the documentation tests (``nox -s doctest-md``), loaded with ``-p markdown_fixtures``.

A code block asks for one with pytest-markdown-docs' ``fixture:<name>`` fence option, e.g.
```` ```python fixture:in_tmp_dir ````; the fixture's value is a global of the block under its name.

A block that needs a service names the fixture that provides it, and the fence says so. Fixtures in
``SERVICE_MARKERS`` also mark the block, so a session selects or deselects it with ``-m``: the
``doctest-md`` session runs everything but ``vllm`` blocks (vLLM is not installed there); the ``vllm``
session, whose venv has vLLM's CPU build, runs exactly those.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# fixture name -> the marker of the blocks that use it (markers registered in the root pyproject.toml)
SERVICE_MARKERS: dict[str, str] = {"vllm_url": "vllm", "vllm_model_dir": "vllm", "redis_url": "redis"}

# The tiny model's server, as ludic-vllm's own `vllm` tests start it (packages/ludic-vllm/tests).
VLLM_SERVER_ARGS = (
    "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
    "--device", "cpu", "--max-num-seqs", "16",
)  # fmt: skip
VLLM_SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONWARNINGS": "ignore",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        for fixture, marker in SERVICE_MARKERS.items():
            if fixture in names:
                item.add_marker(marker)


@pytest.fixture
def in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the block in an empty temporary folder (checkpoints, metrics files)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def gsm8k_files(in_tmp_dir: Path) -> Path:
    """A temporary folder holding ``data/gsm8k/test.jsonl``: 20 GSM8K-shaped rows (question, answer
    ending in ``#### <number>``), so blocks that load GSM8K from local files run offline."""
    path = in_tmp_dir / "data" / "gsm8k" / "test.jsonl"
    path.parent.mkdir(parents=True)
    rows = [
        {
            "question": f"Tom has {n} apples and buys {n + 1} more. How many apples does he have?",
            "answer": f"{n} + {n + 1} = {2 * n + 1}\n#### {2 * n + 1}",
        }
        for n in range(20)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return in_tmp_dir


@pytest.fixture
def fake_tinker_env() -> Iterator[Any]:
    """``TINKER_BASE_URL`` and ``TINKER_API_KEY`` point at ``ludic_tinker.testing``'s loopback fake
    Tinker service for the block, so ``ludic_tinker.connect()`` reaches it as it would the real one.
    The value is the :class:`~ludic_tinker.testing.FakeTinkerService`; the block fails if the fake
    received any request the real service would reject."""
    from ludic_tinker.testing import fake_tinker_service

    with fake_tinker_service() as service:
        yield service


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The URL of a private, empty ``redis-server`` on a free loopback port for the block
    (``ludic_core.pipeline.local_server``); skips, saying why, where no ``redis-server`` is installed."""
    from ludic_core.pipeline.local_server import RedisServerNotFound, local_redis_server

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(local_redis_server())
        except RedisServerNotFound as exc:
            pytest.skip(str(exc))
        yield url


@pytest.fixture(scope="session")
def _vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One ``ludic-vllm serve`` on vLLM's CPU backend for the session's blocks: ``(url, model_dir)``."""
    from ludic_vllm.launch import VLLMServer
    from ludic_vllm.testing import build_tiny_llama

    model_dir = build_tiny_llama(tmp_path_factory.mktemp("docs-tiny-llama"))
    log_path = tmp_path_factory.mktemp("docs-vllm-logs") / "vllm-server.log"
    server = VLLMServer(
        str(model_dir), VLLM_SERVER_ARGS, env=VLLM_SERVER_ENV, log_path=log_path, startup_timeout_s=480
    )
    server.start()
    try:
        yield server.url, str(model_dir)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_url(_vllm_server: tuple[str, str]) -> str:
    """The URL of a ``ludic-vllm serve`` on vLLM's CPU backend serving ``ludic_vllm.testing``'s tiny
    Llama (character vocabulary: ``id = ord(c) - 29``), shared by the session's blocks (start-up takes
    30–80 s on 2 cores). Blocks that use it are marked ``vllm`` and run by the ``vllm`` nox session."""
    return _vllm_server[0]


@pytest.fixture(scope="session")
def vllm_model_dir(_vllm_server: tuple[str, str]) -> str:
    """The directory of the model that :func:`vllm_url`'s server serves (its weights, as a trainer
    holding the same model would publish them)."""
    return _vllm_server[1]
