"""SAPO: soft adaptive policy optimisation — a smooth sigmoid gate in place of a hard clip.

Per token ``−f(r_t) · A`` with ``f(r) = (4/τ) σ(τ (r − 1))`` and ``τ = τ_pos`` when ``A > 0``, else
``τ_neg`` (``A = 0`` uses ``τ_neg``; its term is 0 either way). The gradient flows through ``r``; its
weight ``f'(r) = 4 σ (1 − σ)`` is 1 on-policy and decays smoothly as the ratio drifts.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses._ratio import token_log_ratio
from ludic_train.losses.base import (
    Stats,
    TokenLogpContext,
    TokenLoss,
    WeightedLoss,
    advantage_stats,
    population_std,
)

__all__ = ["SAPOLoss"]


@attrs.frozen
class SAPOLoss(WeightedLoss, TokenLoss, specs.SAPO):
    """Computes :class:`ludic_core.algorithms.SAPO` (its fields and defaults)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        advantages = self.item_weights(ctx, batch)
        ratio = token_log_ratio(ctx, batch, who="SAPOLoss").exp()
        tau_pos, tau_neg = advantages.new_tensor(self.tau_pos), advantages.new_tensor(self.tau_neg)
        tau = torch.where(advantages > 0, tau_pos, tau_neg)[:, None]
        gate = torch.sigmoid(tau * (ratio - 1.0))
        soft_ratio = (4.0 / tau) * gate
        with torch.no_grad():
            stats = advantage_stats(advantages)
            grad_weight = 4.0 * gate * (1.0 - gate)
            stats["ratio_mean"] = ctx.masked_token_mean(ratio)
            stats["grad_weight_mean"] = ctx.masked_token_mean(grad_weight)
            on_action = grad_weight[ctx.mask_bool]
            stats["grad_weight_std"] = (
                population_std(on_action) if on_action.numel() else grad_weight.new_zeros(())
            )
        return -soft_ratio * advantages[:, None], stats
