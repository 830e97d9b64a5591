"""CISPO: clipped importance-sampling weights on a REINFORCE-style objective.

Per token ``−sg(clip(r_t, 1−ε_lo, 1+ε_hi)) · A · log π(a_t)``: unlike PPO the clipped tokens still
get a gradient (through ``log π``), only their weight is bounded.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses._ratio import token_log_ratio
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss, WeightedLoss, advantage_stats

__all__ = ["CISPOLoss"]


@attrs.frozen
class CISPOLoss(WeightedLoss, TokenLoss, specs.CISPO):
    """Computes :class:`ludic_core.algorithms.CISPO` (its fields and defaults)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        advantages = self.item_weights(ctx, batch)
        with torch.no_grad():
            ratio = token_log_ratio(ctx, batch, who="CISPOLoss").exp()
            is_weight = ratio.clamp(1.0 - self.clip_eps_low, 1.0 + self.clip_eps_high)
            stats = advantage_stats(advantages)
            stats["ratio_mean"] = ctx.masked_token_mean(ratio)
            stats["is_weight_mean"] = ctx.masked_token_mean(is_weight)
            stats["clip_frac"] = ctx.masked_token_mean((is_weight != ratio).float())
        return -is_weight * advantages[:, None] * ctx.token_logp, stats
