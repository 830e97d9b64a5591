"""Algorithm presets: credit assigner + loss + preprocess, with the original Ludic's defaults.

Every preset's required inputs come from its loss (``RLAlgorithm.required_inputs``); ``validate``
names what a batch lacks. Presets that need behaviour logprobs (the PPO family) validate them;
plain REINFORCE does not need them unless importance sampling is asked for. The package README's
"Algorithms" section lists every preset with its defaults in one table.

:func:`with_truncated_is` adds the truncated importance-sampling correction for the sampler/trainer
mismatch to any preset.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import attrs

from ludic_core.credit import (
    ConstantCredit,
    GroupNormalizedReturn,
    HybridNormalizedReturn,
    MonteCarloReturn,
)
from ludic_core.errors import ConfigError
from ludic_core.spo import SPOAdvantage, SPOValueTracker
from ludic_core.types import Rollout
from ludic_train.algorithm import RLAlgorithm
from ludic_train.losses.base import SequenceLoss
from ludic_train.losses.cispo import CISPOLoss
from ludic_train.losses.clipped import SequenceClippedSurrogateLoss, TokenClippedSurrogateLoss
from ludic_train.losses.composite import CompositeLoss, LossTerm
from ludic_train.losses.distill import ReverseKLLoss
from ludic_train.losses.gmpo import GMPOLoss
from ludic_train.losses.kl import TokenKLLoss
from ludic_train.losses.reinforce import ReinforceLoss
from ludic_train.losses.sapo import SAPOLoss
from ludic_train.losses.sft import MaskedCrossEntropyLoss
from ludic_train.losses.tis import TruncatedISCorrection
from ludic_train.preprocess import DropZeroWeight, Preprocess, SubtractBaseline, compose_preprocess

__all__ = [
    "make_cispo",
    "make_dr_grpo",
    "make_gmpo",
    "make_grpo",
    "make_gspo",
    "make_mopd",
    "make_opd",
    "make_reinforce",
    "make_reinforce_baseline",
    "make_sapo",
    "make_scalerl",
    "make_sft",
    "make_spo",
    "with_truncated_is",
]


def _drop_zero(enabled: bool, eps: float) -> Preprocess | None:
    return DropZeroWeight(eps) if enabled else None


def _group_credit(group_size: int, normalize_adv: bool, positive_only: bool) -> GroupNormalizedReturn:
    return GroupNormalizedReturn(
        group_size=group_size, normalize_adv=normalize_adv, positive_only=positive_only
    )


def make_reinforce(
    *,
    gamma: float = 1.0,
    length_normalize: bool = False,
    importance_sampling: Literal["token", "sequence", "sequence_geomean"] | None = None,
    is_cap: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "reinforce",
) -> RLAlgorithm:
    """REINFORCE on Monte-Carlo returns. No behaviour logprobs needed unless ``importance_sampling``
    is set: ``"sequence"`` with ``is_cap=None`` is the original's off-policy ``sg(r_b)·A·log π(a_b)``,
    and ``"sequence_geomean"`` with ``length_normalize=True`` and ``is_cap=None`` its length-normalised
    variant (ratio ``exp(mean_t log r_t)``)."""
    loss: SequenceLoss = ReinforceLoss(length_normalize=length_normalize)
    if importance_sampling is not None:
        loss = TruncatedISCorrection(loss, level=importance_sampling, cap=is_cap)
    return RLAlgorithm(
        name=name,
        credit_assigner=MonteCarloReturn(gamma=gamma),
        loss=loss,
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_reinforce_baseline(
    *,
    gamma: float = 1.0,
    normalize_adv: bool = False,
    length_normalize: bool = False,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "reinforce_baseline",
) -> RLAlgorithm:
    """REINFORCE with the macro-batch mean return as baseline (÷ std when ``normalize_adv``).

    Zero-weight dropping, if asked for, happens after the baseline (on the centred weights)."""
    return RLAlgorithm(
        name=name,
        credit_assigner=MonteCarloReturn(gamma=gamma),
        loss=ReinforceLoss(length_normalize=length_normalize),
        preprocess=compose_preprocess(
            SubtractBaseline(normalize=normalize_adv), _drop_zero(drop_zero_weight, drop_zero_weight_eps)
        ),
    )


def make_grpo(
    *,
    group_size: int,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.27,
    length_normalize: bool = False,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "grpo",
) -> RLAlgorithm:
    """GRPO: group-normalised advantages, token-level clipped surrogate, band ``[1−0.2, 1+0.27]``."""
    return RLAlgorithm(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=TokenClippedSurrogateLoss(
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_dr_grpo(
    *,
    group_size: int,
    positive_only: bool = False,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.27,
    length_normalize: bool = False,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "dr_grpo",
) -> RLAlgorithm:
    """Dr.GRPO: GRPO without the std normalisation of advantages (and no length normalisation)."""
    return make_grpo(
        group_size=group_size,
        group_normalize_adv=False,
        positive_only=positive_only,
        clip_eps_low=clip_eps_low,
        clip_eps_high=clip_eps_high,
        length_normalize=length_normalize,
        ratio_clip=ratio_clip,
        drop_zero_weight=drop_zero_weight,
        drop_zero_weight_eps=drop_zero_weight_eps,
        name=name,
    )


def make_gspo(
    *,
    group_size: int,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 3e-4,
    clip_eps_high: float = 4e-4,
    length_normalize: bool = True,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "gspo",
) -> RLAlgorithm:
    """GSPO: sequence-level clipping of the geometric-mean token ratio, band ``[1−3e-4, 1+4e-4]``."""
    return RLAlgorithm(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=SequenceClippedSurrogateLoss(
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_gmpo(
    *,
    group_size: int,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 0.4,
    clip_eps_high: float = 0.4,
    length_normalize: bool = True,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "gmpo",
) -> RLAlgorithm:
    """GMPO: geometric-mean ratio with log-space clipping, band ``(e^−0.4, e^0.4)``."""
    return RLAlgorithm(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=GMPOLoss(
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_cispo(
    *,
    group_size: int,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 1e6,
    clip_eps_high: float = 0.2,
    length_normalize: bool = True,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "cispo",
) -> RLAlgorithm:
    """CISPO: clipped, stop-gradient IS weights on ``A·log π`` (no lower clip by default)."""
    return RLAlgorithm(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=CISPOLoss(
            clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high, length_normalize=length_normalize
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_sapo(
    *,
    group_size: int,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    length_normalize: bool = False,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "sapo",
) -> RLAlgorithm:
    """SAPO: a sigmoid gate on the token ratio instead of a hard clip (temperatures τ₊ = 1.0, τ₋ = 1.05)."""
    return RLAlgorithm(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=SAPOLoss(tau_pos=tau_pos, tau_neg=tau_neg, length_normalize=length_normalize),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_scalerl(
    *,
    group_size: int,
    positive_only: bool = False,
    clip_eps_low: float = 0.20,
    clip_eps_high: float = 0.28,
    length_normalize: bool = True,
    kl_coeff: float = 0.0,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "scalerl",
) -> RLAlgorithm:
    """ScaleRL: group-centred, batch-std-scaled advantages; CISPO (+ token KL when ``kl_coeff > 0``);
    zero-advantage items always dropped. FP32 logits are the trainer's ``cast_logits_to_fp32``."""
    if kl_coeff < 0:
        raise ConfigError(f"make_scalerl: kl_coeff must be >= 0, got {kl_coeff!r}")
    cispo = CISPOLoss(
        clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high, length_normalize=length_normalize
    )
    loss: SequenceLoss = cispo
    if kl_coeff > 0:
        loss = CompositeLoss(
            [
                LossTerm("cispo", cispo),
                LossTerm("kl", TokenKLLoss(coeff=kl_coeff, length_normalize=length_normalize)),
            ]
        )
    return RLAlgorithm(
        name=name,
        credit_assigner=HybridNormalizedReturn(group_size=group_size, positive_only=positive_only),
        loss=loss,
        preprocess=DropZeroWeight(drop_zero_weight_eps),
    )


def make_spo(
    *,
    tracker: SPOValueTracker,
    reward_min: float = 0.0,
    reward_max: float = 1.0,
    adv_eps: float = 1e-8,
    kl_of: Callable[[Rollout], float | None] | None = None,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    length_normalize: bool = False,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "spo",
) -> RLAlgorithm:
    """SPO (arXiv 2509.13232): tracker-baselined, batch-normalised advantages and PPO's clipped surrogate.

    ``tracker`` is the :class:`~ludic_core.spo.SPOValueTracker` that the requests provider
    (:class:`~ludic_core.spo.SPORequests`) samples prompts with: pass the same object to both, so the
    prompts drawn are prioritised by the estimates the advantages use. The loss is the paper's PPO-Clip
    objective on token ratios with the standard symmetric band ``[1−0.2, 1+0.2]``.
    """
    return RLAlgorithm(
        name=name,
        credit_assigner=SPOAdvantage(
            tracker=tracker, eps=adv_eps, reward_min=reward_min, reward_max=reward_max, kl_of=kl_of
        ),
        loss=TokenClippedSurrogateLoss(
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def make_sft(*, length_normalize: bool = False, name: str = "sft") -> RLAlgorithm:
    """Supervised fine-tuning: constant credit 1.0 and masked cross-entropy on the action tokens."""
    return RLAlgorithm(
        name=name,
        credit_assigner=ConstantCredit(1.0),
        loss=MaskedCrossEntropyLoss(length_normalize=length_normalize),
    )


def make_opd(*, kl_coeff: float = 1.0, length_normalize: bool = True, name: str = "opd") -> RLAlgorithm:
    """On-policy distillation: per-token reverse KL to a teacher on the student's own samples.

    Needs ``teacher_logps`` on every item (:class:`~ludic_core.teachers.TeacherScoredBatchSource`
    provides them); the item weight (constant credit) is not used. :func:`make_mopd` with its defaults."""
    return make_mopd(kl_coeff=kl_coeff, length_normalize=length_normalize, name=name)


def make_mopd(
    *,
    kl_coeff: float = 1.0,
    outcome_coeff: float = 0.0,
    group_size: int | None = None,
    length_normalize: bool = True,
    name: str = "mopd",
) -> RLAlgorithm:
    """Multi-teacher on-policy distillation: per-token reverse KL from the student to each item's own
    teacher, optionally plus the env's outcome reward.

    The teachers live outside the algorithm: a :class:`~ludic_core.teachers.TeacherScorer` routes each
    item to its teacher (by default by the ``"teacher"`` its rollout request's meta names) and fills
    ``teacher_logps``, which this loss reads whoever the teacher was. With ``outcome_coeff == 0`` it is
    plain on-policy distillation (constant credit, weights unused). With ``outcome_coeff > 0`` the
    rollouts' rewards also count through a GRPO-style term, ``outcome_coeff ×`` REINFORCE
    (``−A·log π``) on group-normalised advantages (``GroupNormalizedReturn(group_size)``, so the
    requests must come in groups of ``group_size``): the loss is ``kl_coeff·KL + outcome_coeff·PG``.
    ``group_size`` is required then and unused otherwise.
    """
    for field, value in (("kl_coeff", kl_coeff), ("outcome_coeff", outcome_coeff)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ConfigError(f"make_mopd: {field} must be a finite number >= 0, got {value!r}")
    if kl_coeff == 0:
        raise ConfigError(
            "make_mopd: kl_coeff must be > 0 (without the teachers' KL there is nothing to distil; "
            "for the outcome reward alone use make_grpo or make_reinforce)"
        )
    kl = ReverseKLLoss(coeff=kl_coeff, length_normalize=length_normalize)
    if outcome_coeff == 0:
        return RLAlgorithm(name=name, credit_assigner=ConstantCredit(1.0), loss=kl)
    if group_size is None:
        raise ConfigError(
            f"make_mopd: outcome_coeff={outcome_coeff!r} needs group_size (the outcome term's advantages are "
            "normalised per group of requests, as GRPO's)"
        )
    return RLAlgorithm(
        name=name,
        credit_assigner=_group_credit(group_size, normalize_adv=True, positive_only=False),
        loss=CompositeLoss(
            [
                LossTerm("reverse_kl", kl),
                LossTerm("outcome", ReinforceLoss(length_normalize=length_normalize), weight=outcome_coeff),
            ]
        ),
    )


def with_truncated_is(
    algorithm: RLAlgorithm,
    *,
    level: Literal["token", "sequence", "sequence_geomean"] = "token",
    cap: float | None = 2.0,
) -> RLAlgorithm:
    """The same algorithm with its loss wrapped in :class:`TruncatedISCorrection` (needs ``actor_logps``).

    Token level needs a token-decomposable loss (all but GSPO, GMPO and composites); sequence level
    works with every Ludic loss."""
    if not isinstance(algorithm.loss, SequenceLoss):
        raise ConfigError(
            f"with_truncated_is: algorithm {algorithm.name!r} has a {type(algorithm.loss).__name__} loss; "
            "TIS wraps Ludic SequenceLoss subclasses"
        )
    loss = TruncatedISCorrection(algorithm.loss, level=level, cap=cap)
    return attrs.evolve(
        algorithm, loss=loss, required_inputs=algorithm.required_inputs | loss.required_inputs
    )
