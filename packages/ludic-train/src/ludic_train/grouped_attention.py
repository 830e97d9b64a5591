"""Grouped-query attention that reads each key/value head once, for the local sampler on CPU.

Models such as SmolLM2 and Qwen2 share each key/value head among several query heads. transformers'
``sdpa`` attention copies every key/value head once per query head (``repeat_kv``) whenever an
attention mask is given, because masked grouped-query SDPA falls back to a slow kernel on CUDA. The
local sampler always passes a mask (its rows are padded to one length), so at each decode step that
copy rewrites every layer's whole KV cache, three times over for SmolLM2-135M: it took about a
quarter of a decode step on 2 CPU cores. On CPU, torch's fused kernel takes the mask and
``enable_gqa=True`` together and computes the same numbers: the forward outputs are bit-identical
(``tests/test_grouped_attention.py``). Backward is not: the gradients of a shared key/value head are
summed in another order, so keys and values that require grad keep the stock path.

:func:`grouped_kv_attention` switches a model to this attention for the duration of a ``with`` block
(the local client wraps each generated batch in it) and switches it back after, so the model a user
saves or trains elsewhere is left as it was. Anything else (no mask, no grouped heads, another device,
another attention implementation, a transformers without attention registries) keeps the stock path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["GROUPED_SDPA", "grouped_kv_attention"]

GROUPED_SDPA = "ludic_grouped_sdpa"
"""The name this attention is registered under in transformers' attention and mask registries."""

_registered: bool | None = None  # None until the first try; False when transformers lacks the registries


def _grouped_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' ``sdpa`` attention, with a masked grouped-query call on CPU when no gradient
    flows through the keys and values (inference, or the frozen layers below a LoRA adapter)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (
        attention_mask is None  # transformers already uses enable_gqa here
        or getattr(module, "num_key_value_groups", 1) == 1
        or query.device.type != "cpu"
        or key.requires_grad
        or value.requires_grad
        or kwargs.get("position_bias") is not None
        or kwargs.get("cache") is not None  # a paged cache
    ):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    # With a mask, transformers' sdpa never sets is_causal: the mask carries causality.
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return output.transpose(1, 2).contiguous(), None


def _register() -> bool:
    global _registered
    if _registered is None:
        try:
            from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
            from transformers.modeling_utils import AttentionInterface
        except ImportError:
            _registered = False
        else:
            AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa_attention)
            AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)  # the masks sdpa gets
            _registered = True
    return _registered


@contextlib.contextmanager
def grouped_kv_attention(model: Any) -> Iterator[bool]:
    """Within the block, ``model`` (a transformers model or a PEFT wrapper of one) runs its ``sdpa``
    attention as :data:`GROUPED_SDPA`; yields whether it does. Models on another attention
    implementation are left alone."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not _register():
        yield False
        return
    config._attn_implementation = GROUPED_SDPA  # type: ignore[union-attr]
    try:
        yield True
    finally:
        config._attn_implementation = "sdpa"  # type: ignore[union-attr]
