"""GMPO: geometric-mean policy optimisation.

Per token ``ℓ_t = log r_t``, clipped in log space with the advantage's sign ``s``:
``ℓ'_t = s · min(s ℓ_t, clamp(s ℓ_t, −ε_lo, ε_hi))``; the sequence ratio is the geometric mean
``g_b = exp(Σ_t ℓ'_t / n_b)`` (a plain sum when not length-normalising), optionally capped, and
``L = −mean_b g_b A_b``. A geometric mean is far less sensitive to one outlier token ratio than GRPO's
arithmetic token mean.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses._ratio import cap_ratio, token_log_ratio
from ludic_train.losses.base import (
    SequenceLoss,
    Stats,
    TokenLogpContext,
    WeightedLoss,
    advantage_stats,
    population_std,
)

__all__ = ["GMPOLoss"]


@attrs.frozen
class GMPOLoss(WeightedLoss, SequenceLoss, specs.GMPO):
    """Computes :class:`ludic_core.algorithms.GMPO` (its fields and defaults)."""

    def sequence_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        advantages = self.item_weights(ctx, batch)
        sign = torch.sign(advantages)[:, None]
        log_ratio = token_log_ratio(ctx, batch, who="GMPOLoss")
        signed = sign * log_ratio
        clipped = sign * torch.minimum(signed, signed.clamp(-self.clip_eps_low, self.clip_eps_high))
        geo_ratio = cap_ratio(
            ctx.reduce(clipped, length_normalize=self.length_normalize).exp(), self.ratio_clip
        )
        with torch.no_grad():
            stats = advantage_stats(advantages)
            stats["geo_ratio_mean"] = geo_ratio.mean()
            stats["geo_ratio_std"] = population_std(geo_ratio)
            outside = (log_ratio < -self.clip_eps_low) | (log_ratio > self.clip_eps_high)
            stats["clip_frac"] = ctx.masked_token_mean(outside.float())
        return -geo_ratio * advantages, stats
