"""The training forward pass on a collated micro-batch: only the logits the loss reads, and a prompt
prefix that every row shares run once.

With ``logit_positions`` and a model that takes ``logits_to_keep``, the lm-head runs only at the loss's
positions. A token prefix every row shares (system prompt, chat-template header) runs once at batch
size 1 and its KV cache is repeated for every row, so only the suffixes run at full batch size; the
gradient flows back through the repeat into the prefix pass, so loss and gradient equal the full pass's
up to rounding. The prefix ends before the first position the loss reads. Sharing needs a model that
takes ``past_key_values``, ``position_ids``, ``use_cache`` and ``logits_to_keep`` and returns a
transformers ``Cache`` (PEFT-wrapped or not); other models, and prefixes shorter than
:data:`MIN_SHARED_PREFIX`, get one ordinary pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ludic_train.model_signature import accepts_logits_to_keep, forward_takes

__all__ = ["MIN_SHARED_PREFIX", "policy_logits", "shared_prefix_length"]

MIN_SHARED_PREFIX = 16
"""A shorter common prefix is not worth a second forward pass (and a copy of its KV cache per row)."""

_SHARING_KEYWORDS = ("past_key_values", "position_ids", "use_cache")


def shared_prefix_length(input_ids: Tensor, attention_mask: Tensor, logit_positions: Tensor) -> int:
    """How many leading tokens every row has in common (real tokens in every row), capped at the first
    logit position so that the suffix pass computes every logit the loss reads; 0 when the loss reads
    no logit (a batch without action tokens), which leaves nothing to share a pass for."""
    if not logit_positions.numel():
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0) & (attention_mask > 0).all(dim=0)
    common = int(same.long().cumprod(dim=0).sum())
    return min(common, int(logit_positions[0]))


def policy_logits(model: Any, batch: Mapping[str, Tensor], *, share_prefix: bool = True) -> Tensor:
    """The model's logits for a collated micro-batch: ``[B, K, V]`` at ``batch["logit_positions"]``
    when the model takes ``logits_to_keep``, else ``[B, T, V]`` (the loss accepts both). With
    ``share_prefix``, a prefix common to every row runs once (see the module docstring)."""
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    positions = batch.get("logit_positions")
    if positions is None or not accepts_logits_to_keep(model):
        return _logits(model(input_ids=input_ids, attention_mask=attention_mask))
    if share_prefix and input_ids.shape[0] > 1 and all(forward_takes(model, k) for k in _SHARING_KEYWORDS):
        prefix = shared_prefix_length(input_ids, attention_mask, positions)
        if prefix >= MIN_SHARED_PREFIX:
            logits = _with_shared_prefix(model, input_ids, attention_mask, positions, prefix)
            if logits is not None:
                return logits
    return _logits(model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=positions))


def _with_shared_prefix(
    model: Any, input_ids: Tensor, attention_mask: Tensor, positions: Tensor, prefix: int
) -> Tensor | None:
    """The suffix pass's logits at ``positions``, or None when the model's cache cannot be repeated
    per row (then the caller runs the ordinary pass)."""
    rows, length = input_ids.shape
    # The prefix pass's own logits are never read; keep the lm-head to one position.
    head = model(
        input_ids=input_ids[:1, :prefix],
        attention_mask=attention_mask[:1, :prefix],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = head.past_key_values
    if not callable(getattr(cache, "batch_repeat_interleave", None)):
        return None
    cache.batch_repeat_interleave(rows)
    suffix_positions = torch.arange(prefix, length, device=input_ids.device).expand(rows, -1)
    output = model(
        input_ids=input_ids[:, prefix:],
        attention_mask=attention_mask,  # prefix and suffix: the cache holds the prefix's keys
        position_ids=suffix_positions,
        past_key_values=cache,
        use_cache=False,
        logits_to_keep=positions - prefix,
    )
    return _logits(output)


def _logits(output: Any) -> Tensor:
    return output if isinstance(output, Tensor) else output.logits
