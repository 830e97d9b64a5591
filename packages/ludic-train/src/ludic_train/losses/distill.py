"""On-policy distillation: per-token reverse KL ``KL(π_student ‖ π_teacher)`` on the student's samples.

The tokens were sampled from the student, so the reverse-KL gradient is the score-function estimator
``E[(log π(a_t) − log π_T(a_t)) ∇ log π(a_t)]``: each token's log-ratio to the teacher acts as a
(negative) per-token reward. Differentiating ``log π − log π_T`` directly would give ``E[∇ log π] = 0``.
The loss is written so its *value* is the reverse-KL estimate ``coeff · (log π − log π_T)`` while its
gradient is the score-function one. Item weights are not used: the teacher supplies the signal.

``teacher_logps`` come from :class:`ludic_core.teachers.TeacherScorer`, which asks each item's
teacher for the prompt logprobs of the item's tokens; with several teachers (multi-teacher
distillation, the ``mopd`` preset) every item carries its own teacher's logprobs and
this loss is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_train.losses.base import Stats, TokenLogpContext, TokenLoss, require_key

__all__ = ["ReverseKLLoss"]


@attrs.frozen
class ReverseKLLoss(TokenLoss, specs.ReverseKL):
    """Computes :class:`ludic_core.algorithms.ReverseKL` (its fields and defaults)."""

    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        teacher = ctx.shifted(require_key(batch, "teacher_logps", who="ReverseKLLoss"), key="teacher_logps")
        logp = ctx.token_logp
        log_ratio = ((logp - teacher) * ctx.mask).detach()
        # value: coeff·log_ratio; gradient: coeff·log_ratio·∇log π (the (logp − sg(logp)) term is 0-valued).
        per_token = self.coeff * log_ratio * (1.0 + logp - logp.detach())
        return per_token, {"reverse_kl": ctx.masked_token_mean(log_ratio)}
