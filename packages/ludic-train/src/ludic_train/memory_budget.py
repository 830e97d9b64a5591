"""The micro-batch token budget a model and a device can afford, for ``micro_token_budget=None``.

The backward pass keeps, per token, each layer's activations and the fp32 logits with their
log-softmax and gradients::

    layers * (16 * hidden_size + 8 * intermediate_size) * dtype_bytes + 5 * vocab_size * 4

(a slight overestimate of measured peaks; with gradient checkpointing only each layer's
input is kept). The activations may take 60% of a CUDA device's free memory after gradients and AdamW
state, or a quarter of the available CPU memory capped at :data:`CPU_ACTIVATION_CAP_BYTES` (a CPU step's
time grows linearly with its tokens, so a bigger micro-batch buys no speed, and the cap makes runs pack
alike on any machine). The budget is rounded down to a power of two; a longer item trains alone in its
micro-batch (:mod:`ludic_train.microbatch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import torch

__all__ = [
    "CPU_ACTIVATION_CAP_BYTES",
    "MicroBudget",
    "activation_bytes_per_token",
    "derive_micro_token_budget",
]

CPU_ACTIVATION_CAP_BYTES = 2 * 2**30
# The budget used when a model does not describe its shape (no Hugging Face-style ``config``).
FALLBACK_BUDGET = 2048
_CUDA_FREE_SHARE = 0.6
_CPU_AVAILABLE_SHARE = 0.25
_LAYER_HIDDEN_COPIES = 16
_LAYER_INTERMEDIATE_COPIES = 8
_LOGIT_COPIES = 5


@attrs.frozen
class MicroBudget:
    """A derived budget and where it came from (logged, and recorded in the step metrics)."""

    tokens: int
    bytes_per_token: int | None
    activation_bytes: int | None
    reason: str


def _shape(model: Any) -> tuple[int, int, int, int] | None:
    """(layers, hidden, intermediate, vocab) from a Hugging Face-style config, or None."""
    config = getattr(model, "config", None)
    text_config = getattr(config, "text_config", None)  # multimodal configs nest the decoder's
    for candidate in (text_config, config):
        if candidate is None:
            continue
        layers = getattr(candidate, "num_hidden_layers", None)
        hidden = getattr(candidate, "hidden_size", None)
        vocab = getattr(candidate, "vocab_size", None)
        if isinstance(layers, int) and isinstance(hidden, int) and isinstance(vocab, int):
            intermediate = getattr(candidate, "intermediate_size", None)
            if not isinstance(intermediate, int):
                intermediate = 4 * hidden
            return layers, hidden, intermediate, vocab
    return None


def activation_bytes_per_token(
    *, layers: int, hidden: int, intermediate: int, vocab: int, dtype_bytes: int, gradient_checkpointing: bool
) -> int:
    """Bytes one token of a micro-batch keeps for the backward pass (the module docstring's formula)."""
    one_layer = (_LAYER_HIDDEN_COPIES * hidden + _LAYER_INTERMEDIATE_COPIES * intermediate) * dtype_bytes
    kept_layers = layers * hidden * dtype_bytes + one_layer if gradient_checkpointing else layers * one_layer
    return kept_layers + _LOGIT_COPIES * vocab * 4


def _available_cpu_bytes() -> int | None:
    """MemAvailable, lowered to what a cgroup (container) limit leaves; None where unknown."""
    available: int | None = None
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        return None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as limit_file:
            limit = limit_file.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as current_file:
            current = int(current_file.read().strip())
        if limit != "max":
            left = int(limit) - current
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def _activation_bytes(device: torch.device, trainable_bytes: int) -> tuple[int, str]:
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        usable = max(0, free - 3 * trainable_bytes)  # gradients and AdamW's two moments, made lazily
        return int(
            _CUDA_FREE_SHARE * usable
        ), f"{_CUDA_FREE_SHARE:.0%} of the {free / 2**30:.1f} GiB free on {device}"
    available = _available_cpu_bytes()
    if available is None or _CPU_AVAILABLE_SHARE * available >= CPU_ACTIVATION_CAP_BYTES:
        return CPU_ACTIVATION_CAP_BYTES, f"the CPU cap of {CPU_ACTIVATION_CAP_BYTES / 2**30:.0f} GiB"
    return int(_CPU_AVAILABLE_SHARE * available), f"a quarter of the {available / 2**30:.1f} GiB available"


def _power_of_two_floor(value: int) -> int:
    return 1 << (max(value, 1).bit_length() - 1)


def derive_micro_token_budget(
    model: Any, device: torch.device, *, gradient_checkpointing: bool
) -> MicroBudget:
    """The padded-token budget per micro-batch for ``model`` on ``device`` (see the module docstring)."""
    shape = _shape(model)
    if shape is None:
        return MicroBudget(
            FALLBACK_BUDGET,
            None,
            None,
            f"{type(model).__name__} has no config describing its shape: the fallback",
        )
    layers, hidden, intermediate, vocab = shape
    parameters = list(model.parameters())
    dtype_bytes = parameters[0].element_size() if parameters else 4
    per_token = activation_bytes_per_token(
        layers=layers,
        hidden=hidden,
        intermediate=intermediate,
        vocab=vocab,
        dtype_bytes=dtype_bytes,
        gradient_checkpointing=gradient_checkpointing,
    )
    trainable = sum(p.numel() * p.element_size() for p in parameters if p.requires_grad)
    activation, reason = _activation_bytes(device, trainable)
    return MicroBudget(_power_of_two_floor(activation // per_token), per_token, activation, reason)
