"""Entropy bonus: ``L = −coeff · mean_b H̄_b``.

``H_t`` is the entropy of the next-token distribution at the positions that predict an action token —
the same shifted mask as every other loss (the original used the unshifted ``action_mask`` and so
scored the distribution *after* each action token, including the one past the end of the turn). Per
sequence the entropies are averaged over its action tokens (summed when ``length_normalize=False``),
then averaged over sequences, so the bonus combines across micro-batches exactly like every other loss.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss

__all__ = ["EntropyBonus"]


@attrs.frozen
class EntropyBonus(TokenLoss, specs.Entropy):
    """Computes :class:`ludic_core.algorithms.Entropy` (its fields and defaults)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        entropy = ctx.entropy
        return -self.coeff * entropy, {"entropy_mean": ctx.masked_token_mean(entropy).detach()}
