"""Normalise trainer-side parameter names (HF, PEFT, FSDP, DDP, torch.compile) to the checkpoint names
vLLM's ``load_weights`` expects.

vLLM maps checkpoint names itself (``q_proj``/``k_proj``/``v_proj`` → ``qkv_proj`` and so on), so the
publisher sends Hugging Face checkpoint names and never fuses anything. What it must undo are the wrapper
prefixes a training setup adds: ``module.`` (DDP), ``_orig_mod.`` (torch.compile),
``_fsdp_wrapped_module.`` / ``_checkpoint_wrapped_module.`` (FSDP1, activation checkpointing) and PEFT's
``base_model.model.`` and ``.base_layer``.

LoRA factor tensors (``lora_A``/``lora_B``/``lora_embedding_*``) are not weights of the base model:
publishing them as such would silently do nothing useful, so they raise unless the caller asks to drop
them (merge the adapter first, or publish the adapter itself with the file publisher's adapter route).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal, TypeVar

from ludic_core.errors import DataError

__all__ = ["is_lora_name", "normalize_name", "normalize_names"]

T = TypeVar("T")

_WRAPPER_SEGMENTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
_LORA = re.compile(r"(^|\.)lora_(A|B|embedding_A|embedding_B|magnitude_vector)(\.|$)")


def is_lora_name(name: str) -> bool:
    """True for PEFT LoRA factor tensors (not weights of the base model)."""
    return _LORA.search(name) is not None


def normalize_name(name: str) -> str:
    """Map one trainer-side parameter name to its checkpoint-format name."""
    out = name
    for seg in _WRAPPER_SEGMENTS:
        out = out.replace(seg, "")
    while out.startswith("module."):
        out = out[len("module.") :]
    while out.startswith("base_model.model."):
        out = out[len("base_model.model.") :]
    out = out.replace(".base_layer.", ".")
    if out.startswith("model.model."):
        out = out[len("model.") :]
    if out.startswith("layers."):
        out = "model." + out
    return out


def normalize_names(
    named: Mapping[str, T] | Iterable[tuple[str, T]], *, lora: Literal["error", "drop"] = "error"
) -> dict[str, T]:
    """Normalise every name; raise on LoRA factors (or drop them with ``lora="drop"``) and on two
    names that collapse to the same checkpoint name."""
    items = named.items() if isinstance(named, Mapping) else named
    out: dict[str, T] = {}
    origin: dict[str, str] = {}
    for name, value in items:
        if is_lora_name(name):
            if lora == "drop":
                continue
            raise DataError(
                f"parameter {name!r} is a LoRA factor, not a base-model weight; merge the adapter "
                "(peft merge_and_unload) before publishing, publish the adapter with "
                "FilePublisher.publish_adapter, or pass lora='drop' to publish the base weights only"
            )
        target = normalize_name(name)
        if target in out:
            raise DataError(f"parameters {origin[target]!r} and {name!r} both normalise to {target!r}")
        out[target] = value
        origin[target] = name
    return out
