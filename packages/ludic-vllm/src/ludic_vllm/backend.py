"""Command-line wiring for scripts that can sample from a vLLM server (``--backend vllm``).

A training script adds the options with :func:`add_vllm_arguments` and builds everything with
:func:`open_vllm_backend`: the client, the publisher for the chosen transport, and, with
``--vllm-start-server``, a ``ludic-vllm serve`` subprocess on the trainer's model that is stopped when
the backend is closed.

    parser.add_argument("--backend", choices=["local", "vllm"], default="local")
    add_vllm_arguments(parser)
    ...
    if args.backend == "vllm":
        backend = await open_vllm_backend(args, model_dir=path_the_model_was_saved_to)
        client, publisher = backend.client, backend.publisher
        ...
        await backend.aclose()
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_vllm.client import VLLMClient
from ludic_vllm.launch import VLLMServer

__all__ = ["VLLMBackend", "add_vllm_arguments", "open_vllm_backend"]


def add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("vLLM backend (--backend vllm)")
    group.add_argument(
        "--vllm-url", default="http://127.0.0.1:8000", help="server URL (ignored with --vllm-start-server)"
    )
    group.add_argument(
        "--vllm-model-name", default=None, help="served model name (default: the server's first)"
    )
    group.add_argument(
        "--vllm-transport",
        choices=["gloo", "nccl", "files", "upload"],
        default="gloo",
        help="weight transport: collective broadcast (gloo on CPU, nccl on GPU) or safetensors files",
    )
    group.add_argument("--vllm-weights-dir", default=None, help="shared directory for --vllm-transport files")
    group.add_argument("--vllm-api-token", default=None, help="bearer token of the server's weight routes")
    group.add_argument("--vllm-max-concurrency", type=int, default=64)
    group.add_argument(
        "--vllm-timeout-s", type=float, default=600.0, help="per-request and per-publish timeout"
    )
    group.add_argument(
        "--vllm-start-server", action="store_true", help="start a ludic-vllm server on the model"
    )
    group.add_argument("--vllm-server-args", default="", help="extra vLLM arguments for --vllm-start-server")


@attrs.define
class VLLMBackend:
    client: VLLMClient
    publisher: Any
    server: VLLMServer | None = None

    async def aclose(self) -> None:
        try:
            await self.publisher.aclose()
            await self.client.aclose()
        finally:
            if self.server is not None:
                await asyncio.to_thread(self.server.stop)


def _make_publisher(args: argparse.Namespace, url: str) -> Any:
    from ludic_vllm.publisher import FilePublisher, GlooPublisher, NcclPublisher

    common = {"api_token": args.vllm_api_token, "timeout_s": args.vllm_timeout_s, "allow_version_reset": True}
    if args.vllm_transport == "gloo":
        return GlooPublisher(url, **common)
    if args.vllm_transport == "nccl":
        return NcclPublisher(url, **common)
    if args.vllm_transport == "files":
        if not args.vllm_weights_dir:
            raise ConfigError(
                "--vllm-transport files needs --vllm-weights-dir (a directory the server can read)"
            )
        return FilePublisher(url, args.vllm_weights_dir, **common)
    return FilePublisher(url, mode="upload", **common)


async def open_vllm_backend(args: argparse.Namespace, *, model_dir: str | None = None) -> VLLMBackend:
    """Build the client and publisher (and start a server if asked); waits until the server is ready."""
    server = None
    url = args.vllm_url
    if args.vllm_start_server:
        if model_dir is None:
            raise ConfigError("--vllm-start-server needs the model directory to serve")
        # A files transport hands the server paths in the shared directory: the only place it may load from.
        load_dirs = (
            [args.vllm_weights_dir] if args.vllm_transport == "files" and args.vllm_weights_dir else []
        )
        server = VLLMServer(
            model_dir, shlex.split(args.vllm_server_args), api_token=args.vllm_api_token, load_dirs=load_dirs
        )
        await asyncio.to_thread(server.start)
        url = server.url
    client = VLLMClient(
        base_url=url,
        model=args.vllm_model_name,
        api_token=args.vllm_api_token,
        max_concurrency=args.vllm_max_concurrency,
        request_timeout_s=args.vllm_timeout_s,
    )
    try:
        await client.wait_until_ready(timeout_s=args.vllm_timeout_s)
        publisher = _make_publisher(args, url)
    except BaseException:
        await client.aclose()
        if server is not None:
            await asyncio.to_thread(server.stop)
        raise
    return VLLMBackend(client=client, publisher=publisher, server=server)
