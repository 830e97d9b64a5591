"""KL penalties against the behaviour policy.

:class:`TokenKLLoss`: per token ``coeff · (log π(a_t) − log μ(a_t))`` on the sampled tokens — the
``k1`` estimator of ``KL(π‖μ)``; summed per sequence, ÷ ``n_b`` by default. ScaleRL adds it to CISPO
when ``kl_weight > 0``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses._ratio import token_log_ratio
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss

__all__ = ["TokenKLLoss"]


@attrs.frozen
class TokenKLLoss(TokenLoss, specs.TokenKL):
    """Computes :class:`ludic_core.algorithms.TokenKL` (its fields and defaults)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        log_ratio = token_log_ratio(ctx, batch, who="TokenKLLoss")
        stats = {"kl_mean": ctx.masked_token_mean(log_ratio).detach()}
        return self.coeff * log_ratio, stats
