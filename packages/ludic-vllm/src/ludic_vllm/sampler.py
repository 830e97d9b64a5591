"""The ``vllm`` sampler (entry-point group ``ludic.samplers``): ``ludic train tictactoe-grpo
backend.kind=vllm`` trains with the local Trainer (the ``local`` kind it extends) on episodes that the
vLLM servers of ``vllm.urls`` sample through :class:`~ludic_vllm.client.VLLMClient` (prompts rendered
with the trainer's tokenizer, so rollouts carry token ids and behaviour logprobs); after every step the
Trainer publishes its merged weights to every server over ``vllm.transport``, version = trainer step.
Under ``torchrun`` each rank samples its share of every step, and rank 0 alone publishes.

``[backend]`` is only the trained model (``kind``, ``model``, ``device``); every server setting belongs
to ``[vllm]`` (:class:`~ludic_vllm.backend.VLLMBackendConfig`, the table this kind adds)"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.run.backends import ClientBackend, TokenizedClient
from ludic_core.run.configs import BackendConfig
from ludic_core.run.ranks import launched_ranks
from ludic_core.run.samplers import Sampler, SamplerKind
from ludic_vllm.backend import VLLMBackendConfig, make_publisher, make_sampling_client, open_vllm_backend

__all__ = ["check_vllm_sampler", "open_vllm_sampler", "vllm_sampler"]

_OWNED_BY_VLLM = {
    "base_urls": "vllm.urls (or vllm.start_server = true)",
    "max_concurrency": "vllm.max_concurrency",
    "request_timeout_s": "vllm.timeout_s",
    "api_key_env": "vllm.api_token",
}
"""``[backend]`` settings of the OpenAI-compatible backend and their owner in the ``[vllm]`` table."""

SERVER_LOG = "vllm-server.log"
"""A started server's log, in the run directory."""


def vllm_sampler() -> SamplerKind:
    return SamplerKind(
        summary="the Trainer trains the model here; vLLM servers sample and get the weights every step",
        extends="local",
        open="ludic_vllm.sampler:open_vllm_sampler",
        checks=("ludic_vllm.sampler:check_vllm_sampler",),
        tables={"vllm": VLLMBackendConfig},
    )


def check_vllm_sampler(config: Any) -> None:
    """What the ``[vllm]`` table and ``[backend]`` refuse before a model is built or a server contacted
    (the ``local`` kind's checks follow)."""
    backend = config.backend
    defaults = BackendConfig()
    for field in attrs.fields(BackendConfig):
        if field.name in ("kind", "model", "device"):
            continue
        value = getattr(backend, field.name)
        if value != getattr(defaults, field.name):
            owner = _OWNED_BY_VLLM.get(field.name, "the [vllm] table")
            raise ConfigError(
                f"backend.{field.name} = {value!r}: with backend.kind = 'vllm' [backend] is only the trained "
                f"model (kind, model, device); the server is configured by {owner}"
            )
    vllm = config.vllm
    ranks = launched_ranks()
    if vllm.start_server and ranks.distributed:
        raise ConfigError(
            f"vllm.start_server = true under torchrun ({ranks.world_size} ranks): a data-parallel run "
            "samples from servers started beforehand; start `ludic-vllm serve` yourself and list the "
            "servers in vllm.urls (docs/multi-node.md)"
        )
    if not vllm.start_server and vllm.server_args:
        raise ConfigError(
            f"vllm.server_args = {vllm.server_args!r} without vllm.start_server: they are arguments of a "
            "server this run starts"
        )
    if vllm.transport == "nccl" and not backend.device.startswith("cuda"):
        raise ConfigError(
            f"vllm.transport = 'nccl' with backend.device = {backend.device!r}: NCCL broadcasts from a "
            "CUDA device (use 'gloo', 'files' or 'upload' on CPU)"
        )


async def open_vllm_sampler(
    config: Any,
    model: Any,
    tokenizer: Any,
    *,
    run_dir: Path,
    dry_run: bool,
    export: Callable[[Path], None],
) -> Sampler:
    """The client over the servers of ``config.vllm`` and, on rank 0 (the only rank that publishes),
    the publisher to all of them; with ``start_server`` a server on an exported copy of the trainer's
    model. ``dry_run`` builds both without contacting the servers (and starts none), and says so."""
    vllm: VLLMBackendConfig = config.vllm
    publishes = launched_ranks().main
    publishing = (
        f"weights over {vllm.transport}, version = trainer step"
        if publishes
        else "no publisher (rank 0 publishes)"
    )
    servers = ", ".join(vllm.urls)
    if dry_run:
        client = make_sampling_client(vllm, vllm.urls)
        where = (
            "a ludic-vllm server on an export of the model (not started: dry run)"
            if vllm.start_server
            else f"the vLLM server(s) at {servers} (not contacted: dry run)"
        )
        publisher = make_publisher(vllm, vllm.urls) if publishes else None
        return Sampler(
            backend=ClientBackend(TokenizedClient(client, tokenizer)),
            publisher=publisher,
            description=f"{type(client).__name__} for {where}; "
            f"{type(publisher).__name__ + ', ' if publisher is not None else ''}{publishing}",
        )
    export_dir = None
    if vllm.start_server:
        # The server must start from the trainer's weights and tokenizer (chat template included); the
        # first publish replaces them with the trainer's current ones anyway, version = its step.
        export_dir = Path(tempfile.mkdtemp(prefix="ludic-served-model-"))
        await asyncio.to_thread(export, export_dir)
    await asyncio.to_thread(run_dir.mkdir, parents=True, exist_ok=True)
    try:
        opened = await open_vllm_backend(
            vllm,
            model_dir=None if export_dir is None else str(export_dir),
            server_log=str(run_dir / SERVER_LOG),
            with_publisher=publishes,
        )
    except BaseException:
        if export_dir is not None:
            shutil.rmtree(export_dir, ignore_errors=True)
        raise

    async def close() -> None:
        try:
            await opened.aclose()
        finally:
            if export_dir is not None:
                shutil.rmtree(export_dir, ignore_errors=True)

    if opened.server is not None:
        servers = opened.server.url
    publisher_name = f"{type(opened.publisher).__name__}, " if opened.publisher is not None else ""
    return Sampler(
        backend=ClientBackend(TokenizedClient(opened.client, tokenizer)),
        publisher=opened.publisher,
        description=f"{type(opened.client).__name__} at {servers}; {publisher_name}{publishing}",
        close=close,
    )
