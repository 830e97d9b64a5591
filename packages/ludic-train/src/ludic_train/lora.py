"""LoRA through PEFT (``pip install "ludic-train[lora]"``).

The trainer needs nothing special for LoRA: only the adapter parameters require gradients, so only they
are optimised and (with ``CheckpointConfig(weights="trainable")``) checkpointed, and publishing merges
the adapters into full Hugging Face-named weights (:mod:`ludic_train.weights`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ludic_core.errors import ConfigError, missing_extra
from ludic_core.validation import check_int

__all__ = ["apply_lora", "top_layers"]


def apply_lora(
    model: Any,
    *,
    rank: int = 8,
    alpha: float | None = None,
    dropout: float = 0.0,
    target_modules: str | Sequence[str] = "all-linear",
    include_lm_head: bool = False,
    layers: Sequence[int] | None = None,
) -> Any:
    """Wrap ``model`` in a PEFT LoRA model (``alpha`` defaults to ``2 * rank``).

    ``target_modules="all-linear"`` targets every linear layer except the output head;
    ``include_lm_head=True`` adds the head (useful for tiny models whose layers barely move the output).
    ``layers`` adapts only these decoder layers (indices from 0). Backpropagation then stops at the
    lowest adapted layer, so adapting the top layers only makes a training step much cheaper, which is
    what makes RL on a CPU practical.
    """
    check_int("apply_lora: rank", rank, 1)
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"apply_lora: dropout must be in [0, 1), got {dropout!r}")
    layer_indices = _check_layers(model, layers)
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise missing_extra("ludic-train", "lora", "peft") from exc
    targets: str | list[str]
    if isinstance(target_modules, str) and target_modules == "all-linear":
        if include_lm_head or layer_indices is not None:
            # PEFT's "all-linear" shorthand cannot be combined with layers_to_transform: name the layers.
            import torch

            targets = sorted(
                {
                    name.rsplit(".", 1)[-1]
                    for name, module in model.named_modules()
                    if isinstance(module, torch.nn.Linear)
                    and (include_lm_head or name.rsplit(".", 1)[-1] != "lm_head")
                }
            )
        else:
            targets = "all-linear"
    else:
        targets = [target_modules] if isinstance(target_modules, str) else list(target_modules)
        if include_lm_head and "lm_head" not in targets:
            targets.append("lm_head")
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else 2 * rank,  # type: ignore[arg-type]  # floats work
        lora_dropout=dropout,
        target_modules=targets,
        layers_to_transform=layer_indices,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def top_layers(model: Any, count: int, *, field: str = "top_layers") -> range:
    """The indices of ``model``'s top ``count`` decoder layers, for :func:`apply_lora`'s ``layers``.

    ``field`` names the setting ``count`` came from in the error raised when the model has fewer
    layers (a config key such as ``lora.top_layers``, or a command-line flag).
    """
    check_int(field, count, 1)
    layers = _layer_count(model)
    if not isinstance(layers, int):
        raise ConfigError(f"{field}={count}: the model's config has no num_hidden_layers")
    if count > layers:
        raise ConfigError(f"{field}={count} exceeds the model's {layers} decoder layers")
    return range(layers - count, layers)


def _layer_count(model: Any) -> Any:
    """The model config's ``num_hidden_layers`` (None when it has none; the callers check the type)."""
    return getattr(getattr(model, "config", None), "num_hidden_layers", None)


def _check_layers(model: Any, layers: Sequence[int] | None) -> list[int] | None:
    if layers is None:
        return None
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence):
        raise ConfigError(f"apply_lora: layers must be a sequence of layer indices, got {layers!r}")
    count = _layer_count(model)
    indices = list(layers)
    bad = [
        i
        for i in indices
        if isinstance(i, bool) or not isinstance(i, int) or i < 0 or (count is not None and i >= count)
    ]
    if not indices or bad:
        limit = f" in [0, {count})" if count is not None else ""
        raise ConfigError(f"apply_lora: layers must be non-empty ints{limit}; got {layers!r}")
    return sorted(set(indices))
