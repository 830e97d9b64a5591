"""FSDP2 wrapping (``torch.distributed.fsdp.fully_shard``) for Hugging Face decoder models.

Each decoder layer becomes its own FSDP unit (gathered just in time for its forward and backward),
then the root module takes the rest (embeddings, final norm, head). The trainer detects an FSDP2
module and disables the gradient reduce-scatter on all but the last micro-batch of a step;
checkpoints and publishing gather full state dicts collectively.
"""

from __future__ import annotations

from typing import Any

from ludic_core.errors import ConfigError
from ludic_train.model_signature import unwrapped_model

__all__ = ["decoder_layers", "shard_model"]


def decoder_layers(model: Any) -> list[Any]:
    """The repeated decoder blocks of a HF causal LM (PEFT wrappers are looked through)."""
    base = unwrapped_model(model)
    inner = getattr(base, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ConfigError(
            f"shard_model: cannot find decoder layers on {type(base).__name__} (expected .model.layers)"
        )
    return list(layers)


def shard_model(model: Any, *, mp_policy: Any = None, reshard_after_forward: bool = True) -> Any:
    """``fully_shard`` every decoder layer, then the root; returns the (same) sharded model.

    Needs an initialised default process group. ``mp_policy`` is a ``MixedPrecisionPolicy`` (e.g.
    bf16 parameters with fp32 gradient reduction on GPUs).
    """
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise ConfigError("shard_model needs torch.distributed initialised (init_process_group) first")
    kwargs: dict[str, Any] = {"reshard_after_forward": reshard_after_forward}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model
