"""Algorithm presets as data: credit assigner + loss spec + preprocess, with the original Ludic's defaults.

Every preset returns an :class:`~ludic_core.algorithms.spec.AlgorithmSpec`; this module is the one place
their defaults live. ludic-train's ``make_*`` build torch algorithms from these, ludic-tinker maps them
to Tinker's losses, and ``ludic_core.registry.make_algorithm("grpo")`` builds them by name
(the names below, declared as ``ludic.algorithms`` entry points by ludic-core).

Group-based presets read each group's size from the meta the request strategy writes
(``GRPORequestStrategy(group_size=8)``), so the size is given once; their ``group_size`` is for
hand-made groups only (and is checked against the meta where both exist).

A preset's required inputs come from its loss: the PPO family reads behaviour logprobs
(``actor_logps``), plain REINFORCE does not unless importance sampling is asked for, distillation reads
``teacher_logps``. :func:`with_truncated_is` adds the truncated importance-sampling correction for the
sampler/trainer mismatch to any preset.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

from ludic_core.algorithms.losses import (
    CISPO,
    GMPO,
    SAPO,
    ClippedSurrogate,
    Composite,
    CrossEntropy,
    LossSpec,
    Reinforce,
    ReverseKL,
    Term,
    TISLevel,
    TokenKL,
    TruncatedIS,
)
from ludic_core.algorithms.preprocess import DropZeroWeight, Preprocess, SubtractBaseline, compose_preprocess
from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.credit import ConstantCredit, GroupNormalizedReturn, HybridNormalizedReturn, MonteCarloReturn
from ludic_core.errors import ConfigError
from ludic_core.spo import SPOAdvantage, SPOValueTracker
from ludic_core.types import Rollout

__all__ = [
    "cispo",
    "dr_grpo",
    "gmpo",
    "grpo",
    "gspo",
    "mopd",
    "opd",
    "reinforce",
    "reinforce_baseline",
    "sapo",
    "scalerl",
    "sft",
    "spo",
    "with_truncated_is",
]


def _drop_zero(enabled: bool, eps: float) -> Preprocess | None:
    return DropZeroWeight(eps) if enabled else None


def _group_credit(group_size: int | None, normalize_adv: bool, positive_only: bool) -> GroupNormalizedReturn:
    return GroupNormalizedReturn(
        group_size=group_size, normalize_adv=normalize_adv, positive_only=positive_only
    )


def reinforce(
    *,
    gamma: float = 1.0,
    length_normalize: bool = False,
    importance_sampling: TISLevel | None = None,
    is_cap: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "reinforce",
) -> AlgorithmSpec:
    """REINFORCE on Monte-Carlo returns. No behaviour logprobs needed unless ``importance_sampling``
    is set: ``"sequence"`` with ``is_cap=None`` is the original's off-policy ``sg(r_b)·A·log π(a_b)``,
    and ``"sequence_geomean"`` with ``length_normalize=True`` and ``is_cap=None`` its length-normalised
    variant (ratio ``exp(mean_t log r_t)``)."""
    loss: LossSpec = Reinforce(length_normalize=length_normalize)
    if importance_sampling is not None:
        loss = TruncatedIS(loss, level=importance_sampling, cap=is_cap)
    return AlgorithmSpec(
        name=name,
        credit_assigner=MonteCarloReturn(gamma=gamma),
        loss=loss,
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def reinforce_baseline(
    *,
    gamma: float = 1.0,
    normalize_adv: bool = False,
    length_normalize: bool = False,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "reinforce_baseline",
) -> AlgorithmSpec:
    """REINFORCE with the macro-batch mean return as baseline (÷ std when ``normalize_adv``).

    Zero-weight dropping, if asked for, happens after the baseline (on the centred weights)."""
    return AlgorithmSpec(
        name=name,
        credit_assigner=MonteCarloReturn(gamma=gamma),
        loss=Reinforce(length_normalize=length_normalize),
        preprocess=compose_preprocess(
            SubtractBaseline(normalize=normalize_adv), _drop_zero(drop_zero_weight, drop_zero_weight_eps)
        ),
    )


def grpo(
    *,
    group_size: int | None = None,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.27,
    length_normalize: bool = False,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "grpo",
) -> AlgorithmSpec:
    """GRPO: group-normalised advantages, token-level clipped surrogate, band ``[1−0.2, 1+0.27]``."""
    return AlgorithmSpec(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=ClippedSurrogate(
            level="token",
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def dr_grpo(
    *,
    group_size: int | None = None,
    positive_only: bool = False,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.27,
    length_normalize: bool = False,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "dr_grpo",
) -> AlgorithmSpec:
    """Dr.GRPO: GRPO without the std normalisation of advantages (and no length normalisation)."""
    return grpo(
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


def gspo(
    *,
    group_size: int | None = None,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 3e-4,
    clip_eps_high: float = 4e-4,
    length_normalize: bool = True,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "gspo",
) -> AlgorithmSpec:
    """GSPO: sequence-level clipping of the geometric-mean token ratio, band ``[1−3e-4, 1+4e-4]``."""
    return AlgorithmSpec(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=ClippedSurrogate(
            level="sequence",
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def gmpo(
    *,
    group_size: int | None = None,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 0.4,
    clip_eps_high: float = 0.4,
    length_normalize: bool = True,
    ratio_clip: float | None = None,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "gmpo",
) -> AlgorithmSpec:
    """GMPO: geometric-mean ratio with log-space clipping, band ``(e^−0.4, e^0.4)``."""
    return AlgorithmSpec(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=GMPO(
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def cispo(
    *,
    group_size: int | None = None,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    clip_eps_low: float = 1e6,
    clip_eps_high: float = 0.2,
    length_normalize: bool = True,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "cispo",
) -> AlgorithmSpec:
    """CISPO: clipped, stop-gradient IS weights on ``A·log π`` (no lower clip by default)."""
    return AlgorithmSpec(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=CISPO(clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high, length_normalize=length_normalize),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def sapo(
    *,
    group_size: int | None = None,
    group_normalize_adv: bool = True,
    positive_only: bool = False,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    length_normalize: bool = False,
    drop_zero_weight: bool = False,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "sapo",
) -> AlgorithmSpec:
    """SAPO: a sigmoid gate on the token ratio instead of a hard clip (temperatures τ₊ = 1.0, τ₋ = 1.05)."""
    return AlgorithmSpec(
        name=name,
        credit_assigner=_group_credit(group_size, group_normalize_adv, positive_only),
        loss=SAPO(tau_pos=tau_pos, tau_neg=tau_neg, length_normalize=length_normalize),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def scalerl(
    *,
    group_size: int | None = None,
    positive_only: bool = False,
    clip_eps_low: float = 0.20,
    clip_eps_high: float = 0.28,
    length_normalize: bool = True,
    kl_coeff: float = 0.0,
    drop_zero_weight_eps: float = 1e-4,
    name: str = "scalerl",
) -> AlgorithmSpec:
    """ScaleRL: group-centred, batch-std-scaled advantages; CISPO (+ token KL when ``kl_coeff > 0``);
    zero-advantage items always dropped. FP32 logits are the trainer's ``cast_logits_to_fp32``."""
    if not (isinstance(kl_coeff, (int, float)) and kl_coeff >= 0):
        raise ConfigError(f"scalerl: kl_coeff must be >= 0, got {kl_coeff!r}")
    main = CISPO(clip_eps_low=clip_eps_low, clip_eps_high=clip_eps_high, length_normalize=length_normalize)
    loss: LossSpec = main
    if kl_coeff > 0:
        loss = Composite(
            [
                Term("cispo", main),
                Term("kl", TokenKL(coeff=kl_coeff, length_normalize=length_normalize)),
            ]
        )
    return AlgorithmSpec(
        name=name,
        credit_assigner=HybridNormalizedReturn(group_size=group_size, positive_only=positive_only),
        loss=loss,
        preprocess=DropZeroWeight(drop_zero_weight_eps),
    )


def spo(
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
) -> AlgorithmSpec:
    """SPO (arXiv 2509.13232): tracker-baselined, batch-normalised advantages and PPO's clipped surrogate.

    ``tracker`` is the :class:`~ludic_core.spo.SPOValueTracker` that the requests provider
    (:class:`~ludic_core.spo.SPORequests`) samples prompts with: pass the same object to both, so the
    prompts drawn are prioritised by the estimates the advantages use. The loss is the paper's PPO-Clip
    objective on token ratios with the standard symmetric band ``[1−0.2, 1+0.2]``.
    """
    return AlgorithmSpec(
        name=name,
        credit_assigner=SPOAdvantage(
            tracker=tracker, eps=adv_eps, reward_min=reward_min, reward_max=reward_max, kl_of=kl_of
        ),
        loss=ClippedSurrogate(
            level="token",
            clip_eps_low=clip_eps_low,
            clip_eps_high=clip_eps_high,
            length_normalize=length_normalize,
            ratio_clip=ratio_clip,
        ),
        preprocess=_drop_zero(drop_zero_weight, drop_zero_weight_eps),
    )


def sft(*, length_normalize: bool = False, name: str = "sft") -> AlgorithmSpec:
    """Supervised fine-tuning: constant credit 1.0 and masked cross-entropy on the action tokens."""
    return AlgorithmSpec(
        name=name, credit_assigner=ConstantCredit(1.0), loss=CrossEntropy(length_normalize=length_normalize)
    )


def opd(*, kl_coeff: float = 1.0, length_normalize: bool = True, name: str = "opd") -> AlgorithmSpec:
    """On-policy distillation: per-token reverse KL to a teacher on the student's own samples.

    Needs ``teacher_logps`` on every item (:class:`~ludic_core.teachers.TeacherScoredBatchSource`
    provides them); the item weight (constant credit) is not used. :func:`mopd` with its defaults."""
    return mopd(kl_coeff=kl_coeff, length_normalize=length_normalize, name=name)


def mopd(
    *,
    kl_coeff: float = 1.0,
    outcome_coeff: float = 0.0,
    group_size: int | None = None,
    length_normalize: bool = True,
    name: str = "mopd",
) -> AlgorithmSpec:
    """Multi-teacher on-policy distillation: per-token reverse KL from the student to each item's own
    teacher, optionally plus the env's outcome reward.

    The teachers live outside the algorithm: a :class:`~ludic_core.teachers.TeacherScorer` routes each
    item to its teacher (by default by the ``"teacher"`` its rollout request's meta names) and fills
    ``teacher_logps``, which this loss reads whoever the teacher was. With ``outcome_coeff == 0`` it is
    plain on-policy distillation (constant credit, weights unused). With ``outcome_coeff > 0`` the
    rollouts' rewards also count through a GRPO-style term, ``outcome_coeff ×`` REINFORCE
    (``−A·log π``) on group-normalised advantages (:class:`GroupNormalizedReturn`, so the requests
    must come in groups, e.g. from ``GRPORequestStrategy``): the loss is ``kl_coeff·KL +
    outcome_coeff·PG``. ``group_size`` is needed only for hand-made groups without it in their meta.
    """
    for field, value in (("kl_coeff", kl_coeff), ("outcome_coeff", outcome_coeff)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ConfigError(f"mopd: {field} must be a finite number >= 0, got {value!r}")
    if kl_coeff == 0:
        raise ConfigError(
            "mopd: kl_coeff must be > 0 (without the teachers' KL there is nothing to distil; "
            "for the outcome reward alone use grpo or reinforce)"
        )
    kl = ReverseKL(coeff=kl_coeff, length_normalize=length_normalize)
    if outcome_coeff == 0:
        return AlgorithmSpec(name=name, credit_assigner=ConstantCredit(1.0), loss=kl)
    return AlgorithmSpec(
        name=name,
        credit_assigner=_group_credit(group_size, normalize_adv=True, positive_only=False),
        loss=Composite(
            [
                Term("reverse_kl", kl),
                Term("outcome", Reinforce(length_normalize=length_normalize), weight=outcome_coeff),
            ]
        ),
    )


def with_truncated_is(
    spec: AlgorithmSpec, *, level: TISLevel = "token", cap: float | None = 2.0
) -> AlgorithmSpec:
    """The same algorithm with its loss wrapped in :class:`~ludic_core.algorithms.losses.TruncatedIS`
    (needs ``actor_logps``).

    Token level needs a token-decomposable loss (all but GSPO, GMPO and composites); sequence level
    works with every loss."""
    if not isinstance(spec, AlgorithmSpec):
        raise ConfigError(f"with_truncated_is: expected an AlgorithmSpec, got {type(spec).__name__}")
    loss = TruncatedIS(spec.loss, level=level, cap=cap)
    return attrs.evolve(spec, loss=loss, required_inputs=spec.required_inputs | loss.required_inputs)
