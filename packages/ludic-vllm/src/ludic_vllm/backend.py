"""One value that says how a trainer samples from vLLM, and the call that builds it.

:class:`VLLMBackendConfig` holds every choice (server URLs or a server to start, weight transport,
token, concurrency, timeout); :func:`open_vllm_backend` builds the client (a
:class:`~ludic_vllm.client.VLLMClient`, or a :class:`~ludic_core.client_pool.ClientPool` of one per
server), the publisher that pushes every update to all servers, and with ``start_server`` a
``ludic-vllm serve`` subprocess stopped on close::

    backend = await open_vllm_backend(VLLMBackendConfig(transport="upload"), model_dir=saved_model)
    ...
    await backend.aclose()

The ``[vllm]`` table of ``ludic train <rl-recipe> backend.kind=vllm`` is this config.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any, Literal

import attrs

from ludic_core.client_pool import ClientPool
from ludic_core.errors import ConfigError
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S
from ludic_core.run.configs import server_urls
from ludic_core.validation import int_at_least, positive_number
from ludic_vllm.client import VLLMClient, VLLMClientConfig
from ludic_vllm.launch import VLLMServer

__all__ = [
    "TRANSPORT_CHOICES",
    "VLLMBackend",
    "VLLMBackendConfig",
    "make_publisher",
    "make_sampling_client",
    "make_vllm_client",
    "open_vllm_backend",
]

Transport = Literal["gloo", "nccl", "files", "upload"]
TRANSPORT_CHOICES: tuple[str, ...] = ("gloo", "nccl", "files", "upload")
"""Weight transports: a collective broadcast (gloo on CPU, nccl on GPU) or safetensors files on a
shared directory (``files``) or in the request body (``upload``)."""


def _check_transport(_i: Any, _a: attrs.Attribute[Any], value: object) -> None:
    if value not in TRANSPORT_CHOICES:
        raise ConfigError(
            f"VLLMBackendConfig.transport must be one of {list(TRANSPORT_CHOICES)}, got {value!r}"
        )


_DEFAULT_URLS = ("http://127.0.0.1:8000",)


def _url_tuple(value: object) -> object:
    # A lone URL is a list of one (as the run-config loader reads it), never a string of characters.
    if isinstance(value, str):
        return (value,)
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen
class VLLMBackendConfig:
    """How to reach (or start) the vLLM servers and push weights to them.

    ``urls`` are one or more servers serving the same model: requests go to the least busy, every
    publish reaches all of them. They are ignored with ``start_server``, which starts one server (the
    started server's URL is used). ``weights_dir`` is the directory both sides can read, required by
    the ``files`` transport (a started server may load from it and nowhere else). ``timeout_s`` bounds
    each request and each publish. ``server_args`` are extra vLLM arguments for a started server, as one
    shell-quoted string.
    """

    urls: tuple[str, ...] = attrs.field(default=_DEFAULT_URLS, converter=_url_tuple, validator=server_urls)
    model_name: str | None = None
    transport: Transport = attrs.field(default="gloo", validator=_check_transport)
    weights_dir: str | None = None
    api_token: str | None = None
    max_concurrency: int = attrs.field(
        default=attrs.fields(VLLMClientConfig).max_concurrency.default, validator=int_at_least(1)
    )
    timeout_s: float = attrs.field(default=DEFAULT_MODEL_CALL_TIMEOUT_S, validator=positive_number())
    start_server: bool = False
    server_args: str = ""

    def __attrs_post_init__(self) -> None:
        if self.transport == "files" and not self.weights_dir:
            raise ConfigError(
                "VLLMBackendConfig.transport='files' needs weights_dir (a directory the server can read)"
            )
        if self.start_server and self.urls != _DEFAULT_URLS:
            raise ConfigError(
                f"VLLMBackendConfig.urls = {list(self.urls)} with start_server = true: the run starts one "
                "server on a free local port; set one of the two (several servers: start them yourself "
                "and list them in urls)"
            )


@attrs.define
class VLLMBackend:
    """``client``: one client over every server; ``publisher``: None when opened without one (the
    ranks of a data-parallel trainer other than 0, which only sample)."""

    client: VLLMClient | ClientPool
    publisher: Any
    server: VLLMServer | None = None

    async def aclose(self) -> None:
        try:
            if self.publisher is not None:
                await self.publisher.aclose()
            await self.client.aclose()
        finally:
            if self.server is not None:
                await asyncio.to_thread(self.server.stop)


def make_publisher(config: VLLMBackendConfig, urls: tuple[str, ...]) -> Any:
    """The publisher of ``config.transport`` for the servers at ``urls`` (each update reaches all of
    them); it connects on first publish."""
    from ludic_vllm.publisher import FilePublisher, GlooPublisher, NcclPublisher, PublishSettings

    # The trainer restarts from step 0 against a server that may already serve a later version.
    settings = PublishSettings(
        api_token=config.api_token, timeout_s=config.timeout_s, allow_version_reset=True
    )
    url = list(urls)
    if config.transport == "gloo":
        return GlooPublisher(url, settings=settings)
    if config.transport == "nccl":
        return NcclPublisher(url, settings=settings)
    if config.transport == "files":
        return FilePublisher(url, config.weights_dir, settings=settings)
    return FilePublisher(url, mode="upload", settings=settings)


def make_vllm_client(config: VLLMBackendConfig, url: str) -> VLLMClient:
    """The client for the server at ``url`` (it connects on first request)."""
    return VLLMClient(
        base_url=url,
        model=config.model_name,
        api_token=config.api_token,
        max_concurrency=config.max_concurrency,
        request_timeout_s=config.timeout_s,
    )


def make_sampling_client(config: VLLMBackendConfig, urls: tuple[str, ...]) -> VLLMClient | ClientPool:
    """One client for the servers at ``urls``: a :class:`VLLMClient` for one server, a
    :class:`~ludic_core.client_pool.ClientPool` of one per server for several (``max_concurrency``
    applies per server). Nothing is contacted."""
    clients = [make_vllm_client(config, url) for url in urls]
    return clients[0] if len(clients) == 1 else ClientPool(clients)


async def _wait_until_ready(client: VLLMClient | ClientPool, timeout_s: float) -> None:
    members = client.clients if isinstance(client, ClientPool) else [client]
    await asyncio.gather(*(member.wait_until_ready(timeout_s=timeout_s) for member in members))


async def open_vllm_backend(
    config: VLLMBackendConfig,
    *,
    model_dir: str | None = None,
    server_log: str | None = None,
    with_publisher: bool = True,
) -> VLLMBackend:
    """Build the client and (unless ``with_publisher`` is false) the publisher, and start a server if
    asked, logging to ``server_log`` (default a temporary file); waits until every server is ready."""
    if not isinstance(config, VLLMBackendConfig):
        raise ConfigError(f"open_vllm_backend needs a VLLMBackendConfig, got {type(config).__name__}")
    server = None
    urls = config.urls
    if config.start_server:
        if model_dir is None:
            raise ConfigError(
                "VLLMBackendConfig.start_server needs the model directory to serve (model_dir=)"
            )
        # A files transport hands the server paths in the shared directory: the only place it may load from.
        load_dirs = [config.weights_dir] if config.transport == "files" and config.weights_dir else []
        server = VLLMServer(
            model_dir,
            shlex.split(config.server_args),
            api_token=config.api_token,
            load_dirs=load_dirs,
            log_path=server_log,
        )
        await asyncio.to_thread(server.start)
        urls = (server.url,)
    client = make_sampling_client(config, urls)
    try:
        await _wait_until_ready(client, config.timeout_s)
        publisher = make_publisher(config, urls) if with_publisher else None
    except BaseException:
        await client.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
        raise
    return VLLMBackend(client=client, publisher=publisher, server=server)
