"""Truncated importance sampling (TIS) for the inference/training mismatch.

The sampler and the trainer compute slightly different probabilities for the same weights, and a
pipeline adds staleness. TIS reweights any loss by the ratio of the recomputed policy ``π`` to the
sampler's ``μ`` (``actor_logps``), truncated at ``cap`` and detached (it rescales the gradient):

* ``level="token"``: each token term of a :class:`TokenLoss` times ``sg(min(π(a_t)/μ(a_t), cap))``;
* ``level="sequence"``: each sequence term of a :class:`SequenceLoss` times
  ``sg(min(Π_t π(a_t)/μ(a_t), cap))`` (with ``ReinforceLoss`` and ``cap=None``: off-policy REINFORCE);
* ``level="sequence_geomean"``: the same with the geometric mean of the token ratios
  ``exp(mean_t (log π − log μ))`` (1 without action tokens), which does not grow or vanish
  exponentially with the sequence length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_core.errors import ConfigError
from ludic_train.losses._ratio import token_log_ratio
from ludic_train.losses.base import SequenceLoss, Stats, TokenLogpContext, TokenLoss

__all__ = ["TruncatedISCorrection"]


@attrs.frozen
class TruncatedISCorrection(SequenceLoss, specs.TruncatedIS):
    """Computes :class:`ludic_core.algorithms.TruncatedIS` (its fields and defaults) around a torch loss."""

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.inner, SequenceLoss):
            raise ConfigError(
                f"TruncatedISCorrection wraps a SequenceLoss (Ludic's loss base class); got {type(self.inner).__name__}"
            )
        super().__attrs_post_init__()

    def zero_weight_items_inert(self) -> bool:
        # The correction multiplies the inner loss's terms by finite importance weights.
        return self._wrapped.zero_weight_items_inert()

    @property
    def _wrapped(self) -> SequenceLoss:
        return cast(SequenceLoss, self.inner)  # checked at construction

    def _truncate(self, log_weight: Tensor) -> Tensor:
        if self.cap is not None:
            log_weight = log_weight.clamp(max=math.log(self.cap))
        return log_weight.exp()

    def sequence_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        with torch.no_grad():
            log_ratio = token_log_ratio(ctx, batch, who="TruncatedISCorrection")
        if self.level == "token":
            assert isinstance(self.inner, TokenLoss)  # checked at construction
            per_token, stats = self.inner.token_terms(ctx, batch)
            weights = self._truncate(log_ratio)
            per_sequence = ctx.reduce(per_token * weights, length_normalize=self.inner.length_normalize)
            weight_mean = ctx.masked_token_mean(weights)
            capped = ctx.masked_token_mean((log_ratio.exp() > weights).float())
        else:
            per_sequence, stats = self._wrapped.sequence_terms(ctx, batch)
            # log_ratio is 0 off the action positions, so the masked sum (÷ n_b) is over action tokens.
            sequence_log_ratio = ctx.reduce(log_ratio, length_normalize=self.level == "sequence_geomean")
            weights = self._truncate(sequence_log_ratio)
            per_sequence = per_sequence * weights
            weight_mean = weights.mean()
            capped = (sequence_log_ratio.exp() > weights).float().mean()
        stats["tis/weight_mean"] = weight_mean.detach()
        stats["tis/capped_frac"] = capped.detach()
        # k1 estimate of KL(μ‖π) on the sampler's tokens: how far trainer and sampler disagree.
        stats["tis/mismatch_kl"] = ctx.masked_token_mean(-log_ratio).detach()
        return per_sequence, stats
