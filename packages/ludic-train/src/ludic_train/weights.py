"""Full, Hugging Face-named weights of a training model, LoRA adapters merged in.

What a publisher sends to an inference runtime and what :func:`export_pretrained` writes: the base
model's own parameter names (``model.layers.0.self_attn.q_proj.weight``), whatever PEFT or FSDP2
wrapping the trainer uses.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "export_pretrained",
    "hf_name",
    "is_fsdp_module",
    "is_peft_model",
    "merged_adapters",
    "merged_state_dict",
]

_PEFT_PREFIX = re.compile(r"^(base_model\.model\.)+")


def is_peft_model(model: Any) -> bool:
    return callable(getattr(model, "merge_adapter", None)) and callable(
        getattr(model, "unmerge_adapter", None)
    )


def is_fsdp_module(model: Any) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch build without distributed support
        return False
    return isinstance(model, FSDPModule)


def hf_name(name: str) -> str:
    """``base_model.model.model.layers.0.q_proj.base_layer.weight`` → ``model.layers.0.q_proj.weight``."""
    return _PEFT_PREFIX.sub("", name).replace(".base_layer.", ".")


@contextlib.contextmanager
def merged_adapters(model: Any) -> Iterator[None]:
    """Merge PEFT adapters into the base weights for the duration of the block (no-op otherwise)."""
    if not is_peft_model(model):
        yield
        return
    model.merge_adapter()
    try:
        yield
    finally:
        model.unmerge_adapter()


def merged_state_dict(
    model: Any,
    *,
    param_filter: Callable[[str, torch.Tensor], bool] | None = None,
    device: str | torch.device | None = "cpu",
) -> dict[str, torch.Tensor]:
    """The full weights with adapters merged, HF-named, detached copies on ``device``.

    Under FSDP2 every rank must call this (it gathers the shards); every rank gets the full dict.
    """

    raw: Mapping[str, Any]  # tensors (DCP's return type is a wider union)
    with merged_adapters(model):
        if is_fsdp_module(model):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            raw = dict(
                get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            )

        else:
            raw = model.state_dict()
        out: dict[str, torch.Tensor] = {}
        for name, tensor in raw.items():
            # Adapter matrices are already merged; for `modules_to_save` the trained copy replaces the
            # frozen original under the original's name.
            if "lora_" in name or ".original_module." in name:
                continue
            key = hf_name(name.replace(".modules_to_save.default.", "."))
            if param_filter is not None and not param_filter(key, tensor):
                continue
            out[key] = tensor.detach().to(device).clone() if device is not None else tensor.detach().clone()
    return out


def export_pretrained(model: Any, out_dir: str | os.PathLike[str], *, tokenizer: Any = None) -> None:
    """Write a plain HF directory of the merged model (``from_pretrained`` loads it with no PEFT).

    Under FSDP2 every rank must call this (the shards are gathered); rank 0 writes."""
    import torch.distributed as dist

    base = model.get_base_model() if is_peft_model(model) else model
    state = merged_state_dict(model)
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return
    base.save_pretrained(str(out_dir), state_dict=state)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))
