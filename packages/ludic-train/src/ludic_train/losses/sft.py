"""Supervised fine-tuning: weighted masked cross-entropy on the action tokens.

Per token ``−w_b · log π(a_t)``; summed per sequence and ÷ ``n_b`` when ``length_normalize``. With ``ConstantCredit(1.0)``
every weight is 1; rejection-sampled data may carry other weights.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss, WeightedLoss

__all__ = ["MaskedCrossEntropyLoss"]


@attrs.frozen
class MaskedCrossEntropyLoss(WeightedLoss, TokenLoss, specs.CrossEntropy):
    """Computes :class:`ludic_core.algorithms.CrossEntropy` (its fields and defaults)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        weights = self.item_weights(ctx, batch)
        with torch.no_grad():
            nll_per_token = ctx.reduce(-ctx.token_logp, length_normalize=False) / ctx.token_counts
            stats = {
                "nll_mean": nll_per_token.mean(),
                "logp_mean": ctx.sequence_logp(length_normalize=self.length_normalize).mean(),
                "avg_action_tokens": ctx.mask.sum(1).mean(),
            }
        return -weights[:, None] * ctx.token_logp, stats
