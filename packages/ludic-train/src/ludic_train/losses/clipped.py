"""PPO-style clipped surrogates against the behaviour policy.

* :class:`TokenClippedSurrogateLoss` — GRPO / Dr.GRPO: one ratio per token,
  ``−Σ_t min(r_t A, clip(r_t, 1−ε_lo, 1+ε_hi) A)``.
* :class:`SequenceClippedSurrogateLoss` — GSPO: one ratio per sequence,
  ``r_b = exp(log π(a_b) − log μ(a_b))``; with ``length_normalize`` (the GSPO preset) both logprobs
  are per-token means, so ``r_b`` is the geometric mean of the token ratios.

The behaviour policy ``μ`` is the sampler (``actor_logps``); ``ratio_clip`` optionally caps ``r``
before the surrogate. ``clip_frac`` counts the tokens whose clipped branch is active (the ratio left
the band in the direction the advantage pushes), i.e. the tokens that get no gradient.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses._ratio import actor_token_logp, cap_ratio, token_log_ratio
from ludic_train.losses.base import (
    SequenceLoss,
    Stats,
    TokenLogpContext,
    TokenLoss,
    WeightedLoss,
    advantage_stats,
)

__all__ = ["SequenceClippedSurrogateLoss", "TokenClippedSurrogateLoss"]


def _surrogate(ratio: Tensor, advantages: Tensor, low: float, high: float) -> Tensor:
    """PPO's pessimistic objective ``min(r·A, clip(r, 1−ε_lo, 1+ε_hi)·A)``."""
    return torch.minimum(ratio * advantages, ratio.clamp(1.0 - low, 1.0 + high) * advantages)


def _active_clip(ratio: Tensor, advantages: Tensor, low: float, high: float) -> Tensor:
    return ((advantages > 0) & (ratio > 1.0 + high)) | ((advantages < 0) & (ratio < 1.0 - low))


@attrs.frozen
class TokenClippedSurrogateLoss(WeightedLoss, TokenLoss, specs.ClippedSurrogate):
    """Computes :class:`ludic_core.algorithms.ClippedSurrogate` at ``level="token"`` (GRPO)."""

    level: specs.SurrogateLevel = attrs.field(default="token", init=False)

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        who = type(self).__name__
        advantages = self.item_weights(ctx, batch)[:, None]
        log_ratio = token_log_ratio(ctx, batch, who=who)
        ratio = cap_ratio(log_ratio.exp(), self.ratio_clip)
        objective = _surrogate(ratio, advantages, self.clip_eps_low, self.clip_eps_high)
        with torch.no_grad():
            stats = advantage_stats(advantages.squeeze(1))
            stats["ratio_mean"] = ctx.masked_token_mean(ratio)
            stats["clip_frac"] = ctx.masked_token_mean(
                _active_clip(ratio, advantages, self.clip_eps_low, self.clip_eps_high).float()
            )
            stats["kl_actor_policy"] = ctx.masked_token_mean(log_ratio.exp() - log_ratio - 1.0)
        return -objective, stats


@attrs.frozen
class SequenceClippedSurrogateLoss(WeightedLoss, SequenceLoss, specs.ClippedSurrogate):
    """Computes :class:`ludic_core.algorithms.ClippedSurrogate` at ``level="sequence"`` (GSPO)."""

    level: specs.SurrogateLevel = attrs.field(default="sequence", init=False)

    def sequence_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        who = type(self).__name__
        advantages = self.item_weights(ctx, batch)
        logp = ctx.sequence_logp(length_normalize=self.length_normalize)
        old = ctx.reduce(actor_token_logp(ctx, batch, who=who), length_normalize=self.length_normalize)
        ratio = cap_ratio((logp - old).exp(), self.ratio_clip)
        objective = _surrogate(ratio, advantages, self.clip_eps_low, self.clip_eps_high)
        with torch.no_grad():
            stats = advantage_stats(advantages)
            stats["ratio_mean"] = ratio.mean()
            active = _active_clip(ratio, advantages, self.clip_eps_low, self.clip_eps_high).float()
            # Token-weighted, as the original reported it: long clipped sequences count for more.
            stats["clip_frac"] = (active * ctx.mask.sum(1)).sum() / ctx.mask.sum().clamp(min=1.0)
            stats["logp_mean"] = logp.mean()
        return -objective, stats
