"""Importance ratios against the behaviour policy (the sampler's ``actor_logps``), shared by the PPO family."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from ludic_train.losses.base import TokenLogpContext, require_key

ACTOR_LOGPS = frozenset({"actor_logps"})


def actor_token_logp(ctx: TokenLogpContext, batch: Mapping[str, Tensor], *, who: str) -> Tensor:
    """``[B, T-1]`` behaviour logprobs aligned with ``ctx.token_logp`` (0 off the action positions)."""
    return ctx.shifted(require_key(batch, "actor_logps", who=who), key="actor_logps") * ctx.mask


def token_log_ratio(ctx: TokenLogpContext, batch: Mapping[str, Tensor], *, who: str) -> Tensor:
    """``log r_bt = log π(a_t) − log μ(a_t)`` on the shifted grid (0 off the action positions)."""
    return (ctx.token_logp - actor_token_logp(ctx, batch, who=who)) * ctx.mask


def cap_ratio(ratio: Tensor, ratio_clip: float | None) -> Tensor:
    """``min(r, ratio_clip)`` — an upper cap on the ratio itself, before any surrogate clipping."""
    return ratio if ratio_clip is None else torch.clamp(ratio, max=ratio_clip)
