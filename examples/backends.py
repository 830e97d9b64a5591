"""Where a training example samples from: the shared ``--backend local|vllm`` wiring.

A script that trains a local model (ludic-train's ``Trainer``) adds the options with
:func:`add_backend_arguments` and gets a :class:`Backend` from :func:`open_backend`:

* ``local`` — ``LocalPolicyClient`` samples in-process from the model being trained; publishing only
  moves the client's policy version (the weights are shared).
* ``vllm`` — ``ludic_vllm.VLLMClient`` samples from a vLLM server (``--vllm-url``, or one started on
  the model with ``--vllm-start-server``); the Trainer publishes its merged, Hugging Face-named weights
  after every step through a ludic-vllm publisher (``--vllm-transport gloo|nccl|files|upload``), with
  version = trainer step.

``tinker`` trains remotely (no local model, no ``Trainer``), so it has its own script per example
(``tic_tac_toe/train_tinker.py``); :func:`add_backend_arguments` lists it so ``--backend tinker`` can
be routed there.

    backend = await open_backend(args, model=model, tokenizer=tokenizer)
    trainer = Trainer(..., publisher=backend.publisher)
    await trainer.publish()   # the sampler serves the trainer's weights, version = trainer.step
    ...
    await trainer.aclose()
    await backend.close()
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

BACKENDS = ("local", "vllm", "tinker")


@attrs.frozen
class Backend:
    name: str
    client: Any
    """A ``ChatClient`` (and ``VersionedClient``) to sample from."""
    publisher: Any
    """A ``PolicyPublisher`` for the Trainer: ``publish(tensors, version=step)``."""
    close: Callable[[], Awaitable[None]]
    """Release the client, the publisher and any server this backend started (idempotent)."""


def add_backend_arguments(parser: argparse.ArgumentParser, *, default: str = "local") -> None:
    """``--backend`` and the ``--vllm-*`` options of ``--backend vllm`` (see :func:`vllm_config`)."""
    parser.add_argument("--backend", default=default, choices=BACKENDS)
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


def vllm_config(args: argparse.Namespace) -> Any:
    """The ``--vllm-*`` flags as a ``ludic_vllm.VLLMBackendConfig`` (which validates them)."""
    from ludic_vllm.backend import VLLMBackendConfig

    return VLLMBackendConfig(
        url=args.vllm_url,
        model_name=args.vllm_model_name,
        transport=args.vllm_transport,
        weights_dir=args.vllm_weights_dir,
        api_token=args.vllm_api_token,
        max_concurrency=args.vllm_max_concurrency,
        timeout_s=args.vllm_timeout_s,
        start_server=args.vllm_start_server,
        server_args=args.vllm_server_args,
    )


async def open_backend(
    args: argparse.Namespace,
    *,
    model: Any,
    tokenizer: Any,
    model_dir: str | Path | None = None,
    seed: int = 0,
) -> Backend:
    """The sampling client and publisher for ``args.backend`` around the trainer's ``model``.

    ``model_dir`` is what ``--vllm-start-server`` serves; without it the model's current (merged)
    weights are exported to a temporary directory first, so the server starts from the trainer's
    weights.
    """
    if args.backend == "local":
        from ludic_train.local_client import LocalPolicyClient

        client = LocalPolicyClient(model, tokenizer, seed=seed, max_batch_size=256)

        async def close_local() -> None:
            return None

        return Backend(name="local", client=client, publisher=client.as_publisher(), close=close_local)
    if args.backend == "vllm":
        return await _open_vllm(args, model=model, tokenizer=tokenizer, model_dir=model_dir)
    if args.backend == "tinker":
        raise SystemExit("--backend tinker trains remotely: run the example's train_tinker.py")
    raise SystemExit(f"--backend: unknown backend {args.backend!r} (choose from {', '.join(BACKENDS)})")


async def _open_vllm(
    args: argparse.Namespace, *, model: Any, tokenizer: Any, model_dir: str | Path | None
) -> Backend:
    try:
        from ludic_vllm.backend import open_vllm_backend
    except ImportError as exc:
        from ludic_core.errors import missing_extra

        raise missing_extra("ludic-vllm", "publisher", "ludic_vllm") from exc
    if not hasattr(args, "vllm_url"):
        raise SystemExit("--backend vllm: parse the arguments with add_backend_arguments(parser)")
    config = vllm_config(args)
    scratch: tempfile.TemporaryDirectory[str] | None = None
    if config.start_server and model_dir is None:
        from ludic_train.weights import export_pretrained

        scratch = tempfile.TemporaryDirectory(prefix="ludic-served-model-")
        export_pretrained(model, scratch.name, tokenizer=tokenizer)
        model_dir = scratch.name
    try:
        vllm = await open_vllm_backend(config, model_dir=None if model_dir is None else str(model_dir))
    except BaseException:
        if scratch is not None:
            scratch.cleanup()
        raise
    closed = False

    async def close_vllm() -> None:
        nonlocal closed
        if closed:
            return
        closed = True
        try:
            await vllm.aclose()
        finally:
            if scratch is not None:
                scratch.cleanup()

    return Backend(name="vllm", client=vllm.client, publisher=vllm.publisher, close=close_vllm)
