"""REINFORCE: ``L = −mean_b A_b · log π(a_b)``.

Plain REINFORCE needs no behaviour logprobs (the original's ``ReinforceLoss`` demanded
``old_logp_action`` even on-policy, so offline data could not use it). The off-policy correction is
the truncated importance-sampling wrapper (:class:`~ludic_train.losses.tis.TruncatedISCorrection`
with ``cap=None``: ``level="sequence"`` reproduces the original's ``sg(r_b)·A_b·log π(a_b)``, and
``level="sequence_geomean"`` around ``ReinforceLoss(length_normalize=True)`` its length-normalised form,
whose ratio is ``exp(mean_t log r_t)``), and the baseline is
subtracted over the whole macro-batch by the :class:`~ludic_core.algorithms.preprocess.SubtractBaseline`
preprocess, not per micro-batch (the ``reinforce_baseline`` preset).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss, WeightedLoss, advantage_stats

__all__ = ["ReinforceLoss"]


@attrs.frozen
class ReinforceLoss(WeightedLoss, TokenLoss, specs.Reinforce):
    """Per token ``−A_b · log π(a_t)``; summed per sequence (÷ ``n_b`` when ``length_normalize``)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        advantages = self.item_weights(ctx, batch)
        stats = advantage_stats(advantages)
        stats["logp_mean"] = ctx.sequence_logp(length_normalize=self.length_normalize).mean().detach()
        return -advantages[:, None] * ctx.token_logp, stats
