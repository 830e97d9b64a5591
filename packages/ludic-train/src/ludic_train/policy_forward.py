"""The training forward pass on a collated micro-batch: only the logits the loss reads, and prompt
tokens that rows share run once.

With ``logit_positions`` and a model that takes ``logits_to_keep``, the lm-head runs only at the loss's
positions. Prompt tokens that rows share run once, in prefix passes whose KV cache the rows then read,
so only the suffixes run at full batch size; the gradient flows back through the cache into the prefix
passes, so loss and gradient equal the full pass's up to rounding. :func:`prefix_plan` finds sharing
at several depths (a system prompt every row has, then the board or question that a GRPO group's
replies share, which :mod:`ludic_train.microbatch` packs together) and runs each distinct prefix once
per level, all ending before the first position the loss reads a logit at. Sharing needs a model that
takes ``past_key_values``, ``position_ids``, ``use_cache`` and ``logits_to_keep`` and returns a
transformers ``Cache`` (PEFT-wrapped or not); other models, and prefixes shorter than
:data:`MIN_SHARED_PREFIX`, get one ordinary pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch
from torch import Tensor

from ludic_train.model_signature import accepts_logits_to_keep, forward_takes
from ludic_train.prefix_levels import plan_levels

__all__ = [
    "MIN_SHARED_PREFIX",
    "PrefixLevel",
    "PrefixPlan",
    "policy_logits",
    "prefix_plan",
    "shared_prefix_length",
]

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
class PrefixLevel:
    """One pass of a :class:`PrefixPlan`: positions ``[start, cut)`` of each distinct prefix of length
    ``cut`` (``tokens``, ``[G, cut - start]``); row ``g`` continues row ``parent[g]`` of the level before
    (``None`` at the first level, which starts at 0)."""

    start: int
    cut: int
    tokens: Tensor
    parent: Tensor | None


@attrs.frozen
class PrefixPlan:
    """Run ``levels`` in order, each reading the KV cache of the one before, then each row's suffix
    from ``length`` on, row ``r`` reading the cache of the last level's row ``row_prefix[r]``."""

    levels: tuple[PrefixLevel, ...]
    row_prefix: Tensor

    @property
    def length(self) -> int:
        """Where the suffixes start: the last level's cut."""
        return self.levels[-1].cut

    @property
    def prefixes(self) -> Tensor:
        """``[G, length]``: the whole prefix of each row of the last level (levels joined)."""
        whole = self.levels[0].tokens
        for level in self.levels[1:]:
            assert level.parent is not None
            whole = torch.cat([whole[level.parent], level.tokens], dim=1)
        return whole

    def tokens_run(self, rows: int, total: int) -> int:
        """Tokens the plan runs for ``rows`` rows padded to ``total``: each level's, then the suffixes."""
        levels = sum(int(level.tokens.numel()) for level in self.levels)
        return levels + rows * (total - self.length)


def prefix_plan(input_ids: Tensor, attention_mask: Tensor, logit_positions: Tensor) -> PrefixPlan | None:
    """The prefixes rows share, each to run once, or None when sharing saves nothing.

    Rows share prefixes at several depths: a system prompt that every row has, a board or question
    that some rows have (a GRPO group's replies share their whole prompt). The plan cuts the rows at
    the positions :func:`~ludic_train.prefix_levels.plan_levels` picks, which minimise the tokens run
    (each extra pass counted as a few tokens more): each level runs each distinct prefix once, from the
    cut before. Cuts stop at the first position the loss reads a logit at, so the suffix pass computes
    every logit the loss reads, and within the columns that are real tokens in every row."""
    if not logit_positions.numel():
        return None
    rows = input_ids.shape[0]
    real = int((attention_mask > 0).all(dim=0).long().cumprod(dim=0).sum())
    limit = min(int(logit_positions[0]), real)
    if limit < MIN_SHARED_PREFIX or rows < 2:
        return None
    # A prompt of `limit + 1` tokens per row: plan_levels keeps each prompt's last position its own,
    # so every cut is at most `limit`.
    prompts = [tuple(row) for row in input_ids[:, : limit + 1].tolist()]
    planned = [(cut, rows_of) for cut, rows_of in plan_levels(prompts) if cut >= MIN_SHARED_PREFIX]
    if not planned:
        return None
    levels = []
    start, previous = 0, None
    for cut, rows_of in planned:
        members: dict[int, int] = {}  # level row -> the first batch row it carries
        for r, level_row in enumerate(rows_of):
            members.setdefault(level_row, r)
        first_rows = torch.tensor(list(members.values()), dtype=torch.long, device=input_ids.device)
        parent = None if previous is None else previous[first_rows]
        levels.append(PrefixLevel(start, cut, input_ids[first_rows, start:cut], parent))
        start, previous = cut, torch.tensor(rows_of, dtype=torch.long, device=input_ids.device)
    assert previous is not None
    return PrefixPlan(tuple(levels), previous)


def _with_shared_prefix(
    model: Any, input_ids: Tensor, attention_mask: Tensor, positions: Tensor, plan: PrefixPlan
) -> Tensor | None:
    """The suffix pass's logits at ``positions``, or None when the model's cache cannot be indexed
    per row (then the caller runs the ordinary pass)."""
    rows, length = input_ids.shape
    cache: Any = None
    for level in plan.levels:
        if level.parent is not None:
            cache.batch_select_indices(level.parent)  # each row its parent's keys; gradients flow back
        count = level.tokens.shape[0]
        # A level's own logits are never read; keep the lm-head to one position.
        output = model(
            input_ids=level.tokens,
            attention_mask=input_ids.new_ones((count, level.cut)),
            position_ids=torch.arange(level.start, level.cut, device=input_ids.device).expand(count, -1),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = output.past_key_values
        if not callable(getattr(cache, "batch_select_indices", None)):
            return None
    prefix = plan.length
    cache.batch_select_indices(plan.row_prefix)
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
