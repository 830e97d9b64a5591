"""On-policy distillation: per-token reverse KL ``KL(π_student ‖ π_teacher)`` on the student's samples.

The tokens were sampled from the student, so the reverse-KL gradient is the score-function estimator
``E[(log π(a_t) − log π_T(a_t)) ∇ log π(a_t)]``: each token's log-ratio to the teacher acts as a
(negative) per-token reward. Differentiating ``log π − log π_T`` directly would give ``E[∇ log π] = 0``.
The loss is written so its *value* is the reverse-KL estimate ``coeff · (log π − log π_T)`` while its
gradient is the score-function one. Item weights are not used: the teacher supplies the signal.

``teacher_logps`` come from :class:`ludic_core.teachers.TeacherScorer`, which asks each item's
teacher for the prompt logprobs of the item's tokens; with several teachers (multi-teacher
distillation, :func:`ludic_train.presets.make_mopd`) every item carries its own teacher's logprobs and
this loss is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
from torch import Tensor

from ludic_core.errors import ConfigError
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss, require_key

__all__ = ["ReverseKLLoss"]


@attrs.frozen
class ReverseKLLoss(TokenLoss):
    """Defaults as the original OPD preset: ``coeff=1.0``, length-normalised."""

    coeff: float = 1.0
    length_normalize: bool = True
    required_inputs = frozenset({"teacher_logps"})

    def __attrs_post_init__(self) -> None:
        if not math.isfinite(self.coeff):
            raise ConfigError(f"ReverseKLLoss.coeff must be finite, got {self.coeff!r}")

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        teacher = ctx.shifted(require_key(batch, "teacher_logps", who="ReverseKLLoss"), key="teacher_logps")
        logp = ctx.token_logp
        log_ratio = ((logp - teacher) * ctx.mask).detach()
        # value: coeff·log_ratio; gradient: coeff·log_ratio·∇log π (the (logp − sg(logp)) term is 0-valued).
        per_token = self.coeff * log_ratio * (1.0 + logp - logp.detach())
        return per_token, {"reverse_kl": ctx.masked_token_mean(log_ratio)}
