"""The training forward pass on a collated micro-batch: only the logits the loss reads, and prompt
tokens that rows share run once.

With ``logit_positions`` and a model that takes ``logits_to_keep``, the lm-head runs only at the loss's
positions. Prompt tokens that rows share run once in a prefix pass whose KV cache each row then reads,
so only the suffixes run at full batch size; the gradient flows back through the cache into the prefix
pass, so loss and gradient equal the full pass's up to rounding. :func:`prefix_plan` picks the cheaper
of two prefixes, both ending before the first position the loss reads: the tokens every row has in
common (a system prompt, a chat-template header), or everything before that position, run once per
distinct prompt (the replies of a GRPO group, which :mod:`ludic_train.microbatch` packs together,
share all of their prompt). Sharing needs a model that takes ``past_key_values``, ``position_ids``,
``use_cache`` and ``logits_to_keep`` and returns a transformers ``Cache`` (PEFT-wrapped or not); other
models, and prefixes shorter than :data:`MIN_SHARED_PREFIX`, get one ordinary pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch
from torch import Tensor

from ludic_train.model_signature import accepts_logits_to_keep, forward_takes

__all__ = ["MIN_SHARED_PREFIX", "PrefixPlan", "policy_logits", "prefix_plan", "shared_prefix_length"]

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
    ``share_prefix``, prompt prefixes that rows share run once (see the module docstring)."""
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    positions = batch.get("logit_positions")
    if positions is None or not accepts_logits_to_keep(model):
        return _logits(model(input_ids=input_ids, attention_mask=attention_mask))
    if share_prefix and input_ids.shape[0] > 1 and all(forward_takes(model, k) for k in _SHARING_KEYWORDS):
        plan = prefix_plan(input_ids, attention_mask, positions)
        if plan is not None:
            logits = _with_shared_prefix(model, input_ids, attention_mask, positions, plan)
            if logits is not None:
                return logits
    return _logits(model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=positions))


@attrs.frozen
class PrefixPlan:
    """Run ``prefixes`` (``[G, length]``, distinct rows) once, then each row's suffix from
    ``length`` on with row ``r`` reading the cache of ``prefixes[row_prefix[r]]``."""

    length: int
    prefixes: Tensor
    row_prefix: Tensor

    def tokens_run(self, rows: int, total: int) -> int:
        return int(self.prefixes.shape[0]) * self.length + rows * (total - self.length)


def prefix_plan(input_ids: Tensor, attention_mask: Tensor, logit_positions: Tensor) -> PrefixPlan | None:
    """The cheaper of two ways to run shared prompt tokens once, or None when neither saves a pass:

    * the prefix every row has in common (:func:`shared_prefix_length`: a system prompt), run once;
    * everything before the first logit position, run once per distinct prefix: rows answering the
      same prompt (a GRPO group's replies) share it whole.

    A prefix shorter than :data:`MIN_SHARED_PREFIX` is not worth its pass."""
    rows, total = input_ids.shape
    plans = []
    common = shared_prefix_length(input_ids, attention_mask, logit_positions)
    if common >= MIN_SHARED_PREFIX:
        plans.append(PrefixPlan(common, input_ids[:1, :common], input_ids.new_zeros(rows)))
    if logit_positions.numel():
        first = int(logit_positions[0])
        if first >= MIN_SHARED_PREFIX and bool((attention_mask[:, :first] > 0).all()):
            distinct, row_prefix = torch.unique(input_ids[:, :first], dim=0, return_inverse=True)
            if distinct.shape[0] < rows:
                plans.append(PrefixPlan(first, distinct, row_prefix))
    return min(plans, key=lambda plan: plan.tokens_run(rows, total), default=None)


def _with_shared_prefix(
    model: Any, input_ids: Tensor, attention_mask: Tensor, positions: Tensor, plan: PrefixPlan
) -> Tensor | None:
    """The suffix pass's logits at ``positions``, or None when the model's cache cannot be indexed
    per row (then the caller runs the ordinary pass)."""
    rows, length = input_ids.shape
    prefix = plan.length
    # The prefix pass's own logits are never read; keep the lm-head to one position.
    head = model(
        input_ids=plan.prefixes,
        attention_mask=torch.ones_like(plan.prefixes),
        use_cache=True,
        logits_to_keep=1,
    )
    cache = head.past_key_values
    if not callable(getattr(cache, "batch_select_indices", None)):
        return None
    cache.batch_select_indices(plan.row_prefix)  # each row its prefix's keys; gradients flow back
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
