"""Algorithm presets as data: one table of rows, each a credit assigner, a loss spec and a preprocess.

Each row (:class:`Preset`) states only what makes the algorithm; calling it builds the
:class:`~ludic_core.algorithms.spec.AlgorithmSpec` (``grpo(group_size=8)``). A keyword sets a field of the
credit assigner, of every loss spec of the row that has it (``<term>_weight`` weights a composite's term;
0 leaves it out), of the baseline, or ``drop_zero_weight[_eps]``, ``importance_sampling`` / ``is_cap``
(:class:`TruncatedIS`) and ``name``; any other keyword is a :class:`ConfigError` naming the ones the row
takes (:meth:`Preset.options`). A loss that reads no item weight gets :class:`ConstantCredit`. Rows are
``ludic.algorithms`` entry points (``ludic_core.registry.make_algorithm("grpo")``). Group-based rows read
each group's size from the request strategy's meta; ``group_size`` is for hand-made groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    TokenKL,
    TruncatedIS,
)
from ludic_core.algorithms.preprocess import DropZeroWeight, SubtractBaseline, compose_preprocess
from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.credit import ConstantCredit, GroupNormalizedReturn, HybridNormalizedReturn, MonteCarloReturn
from ludic_core.errors import ConfigError
from ludic_core.spo import SPOAdvantage

__all__ = [
    "PRESETS",
    "Preset",
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

_PRESET_OPTIONS = ("name", "drop_zero_weight", "drop_zero_weight_eps", "importance_sampling", "is_cap")


def _leaves(loss: LossSpec) -> list[LossSpec]:
    if isinstance(loss, Composite):
        return [leaf for term in loss.terms for leaf in _leaves(term.loss)]
    return [loss]


def _init_fields(cls: type) -> set[str]:
    return {f.name for f in attrs.fields(cls) if f.init}


def _loss_options(loss: LossSpec) -> set[str]:
    names = {f"{t.name}_weight" for t in loss.terms} if isinstance(loss, Composite) else set()
    return names.union(*(_init_fields(type(leaf)) for leaf in _leaves(loss)))


def _set_loss(loss: LossSpec, values: Mapping[str, Any]) -> LossSpec:
    if not isinstance(loss, Composite):
        leaf: Any = loss  # every leaf spec is an attrs class
        return attrs.evolve(leaf, **{k: v for k, v in values.items() if k in _init_fields(type(loss))})
    terms = [
        Term(t.name, _set_loss(t.loss, values), weight=values.get(f"{t.name}_weight", t.weight))
        for t in loss.terms
    ]
    negative = [f"{t.name}_weight={t.weight!r}" for t in terms if not t.weight >= 0]
    if negative:
        raise ConfigError(f"a preset's term weights must be >= 0, got {', '.join(negative)}")
    kept = [t for t in terms if t.weight != 0]
    if not kept:
        raise ConfigError(f"every term of {[t.name for t in terms]} has weight 0: nothing to optimise")
    return kept[0].loss if len(kept) == 1 and kept[0].weight == 1 else Composite(kept)


def _values(values: Mapping[str, Any]) -> dict[str, Any]:
    return dict(values)


@attrs.frozen
class Preset:
    """One algorithm of the table; calling it builds the :class:`AlgorithmSpec` (module docstring)."""

    name: str
    summary: str
    credit: type[Any]
    loss: LossSpec
    credit_values: Mapping[str, Any] = attrs.field(factory=dict, converter=_values)
    baseline: SubtractBaseline | None = None
    drop_zero_weight: bool = False

    def options(self) -> frozenset[str]:
        """Every keyword this preset takes."""
        baseline = _init_fields(SubtractBaseline) if self.baseline is not None else set()
        return frozenset({*_PRESET_OPTIONS, *_init_fields(self.credit), *_loss_options(self.loss), *baseline})

    def __call__(self, **options: Any) -> AlgorithmSpec:
        unknown = sorted(options.keys() - self.options())
        if unknown:
            raise ConfigError(f"{self.name}: unknown option(s) {unknown}; it takes {sorted(self.options())}")
        credit_fields = _init_fields(self.credit)
        credit = self.credit(
            **{**self.credit_values, **{k: v for k, v in options.items() if k in credit_fields}}
        )
        loss = _set_loss(self.loss, options)
        if not loss.reads_weights:
            credit = ConstantCredit()
        baseline = self.baseline
        if baseline is not None:
            baseline = attrs.evolve(
                baseline, **{k: v for k, v in options.items() if k in _init_fields(SubtractBaseline)}
            )
        drop = None
        if options.get("drop_zero_weight", self.drop_zero_weight):
            eps = {"eps": options["drop_zero_weight_eps"]} if "drop_zero_weight_eps" in options else {}
            drop = DropZeroWeight(**eps)
        spec = AlgorithmSpec(
            name=options.get("name", self.name),
            credit_assigner=credit,
            loss=loss,
            preprocess=compose_preprocess(baseline, drop),
        )
        if options.get("importance_sampling") is None:
            return spec
        cap = {"cap": options["is_cap"]} if "is_cap" in options else {}
        return with_truncated_is(spec, level=options["importance_sampling"], **cap)


def with_truncated_is(spec: AlgorithmSpec, **truncated_is: Any) -> AlgorithmSpec:
    """The same algorithm with its loss wrapped in :class:`~ludic_core.algorithms.losses.TruncatedIS`
    (``level``, ``cap``: that spec's fields and defaults; needs ``actor_logps``).

    Token level needs a token-decomposable loss (all but GSPO, GMPO and composites); sequence level
    works with every loss."""
    if not isinstance(spec, AlgorithmSpec):
        raise ConfigError(f"with_truncated_is: expected an AlgorithmSpec, got {type(spec).__name__}")
    loss = TruncatedIS(spec.loss, **truncated_is)
    return attrs.evolve(spec, loss=loss, required_inputs=spec.required_inputs | loss.required_inputs)


reinforce = Preset(
    "reinforce",
    "REINFORCE on Monte-Carlo returns, −A·log π; behaviour logprobs only with importance_sampling "
    "('sequence' with is_cap=None is the original Ludic's off-policy REINFORCE)",
    MonteCarloReturn,
    Reinforce(),
)
reinforce_baseline = attrs.evolve(
    reinforce,
    name="reinforce_baseline",
    summary="REINFORCE minus the macro-batch mean return (÷ std with normalize=True); zero-weight "
    "dropping, if asked for, runs on the centred weights",
    baseline=SubtractBaseline(),
)
grpo = Preset(
    "grpo",
    "GRPO: group-normalised advantages, token-level clipped surrogate",
    GroupNormalizedReturn,
    ClippedSurrogate(level="token", clip_eps_low=0.2, clip_eps_high=0.27),
    credit_values={"normalize_adv": True},
)
dr_grpo = attrs.evolve(
    grpo,
    name="dr_grpo",
    summary="Dr. GRPO: GRPO without the std normalisation of the advantages",
    credit_values={},
)
gspo = attrs.evolve(
    grpo,
    name="gspo",
    summary="GSPO: sequence-level clip of the geometric-mean token ratio",
    loss=ClippedSurrogate(level="sequence", clip_eps_low=3e-4, clip_eps_high=4e-4, length_normalize=True),
)
gmpo = attrs.evolve(grpo, name="gmpo", summary="GMPO: geometric-mean ratio clipped in log space", loss=GMPO())
cispo = attrs.evolve(
    grpo, name="cispo", summary="CISPO: clipped stop-gradient IS weights on A·log π", loss=CISPO()
)
sapo = attrs.evolve(grpo, name="sapo", summary="SAPO: a sigmoid gate on the token ratio", loss=SAPO())
scalerl = Preset(
    "scalerl",
    "ScaleRL: group-centred, batch-std-scaled advantages; CISPO (+ token KL to the sampler with "
    "kl_weight > 0); zero-weight items dropped; fp32 logits are the trainer's cast_logits_to_fp32",
    HybridNormalizedReturn,
    Composite(
        [Term("cispo", CISPO(clip_eps_low=0.2, clip_eps_high=0.28)), Term("kl", TokenKL(), weight=0.0)]
    ),
    drop_zero_weight=True,
)
spo = Preset(
    "spo",
    "SPO (arXiv 2509.13232): advantages against the tracker's success estimate, normalised over the "
    "batch, and PPO's clipped surrogate with the symmetric band; pass the SPORequests' tracker",
    SPOAdvantage,
    ClippedSurrogate(level="token", clip_eps_low=0.2, clip_eps_high=0.2),
)
sft = Preset(
    "sft",
    "supervised fine-tuning: constant credit and masked cross-entropy on the action tokens",
    ConstantCredit,
    CrossEntropy(length_normalize=False),
)
opd = Preset(
    "opd",
    "on-policy distillation: per-token reverse KL to the item's teacher (teacher_logps)",
    ConstantCredit,
    ReverseKL(),
)
mopd = Preset(
    "mopd",
    "multi-teacher on-policy distillation: reverse KL to each item's teacher, plus outcome_weight × "
    "REINFORCE on group-normalised rewards when outcome_weight > 0 (the requests must come in groups)",
    GroupNormalizedReturn,
    Composite(
        [Term("reverse_kl", ReverseKL()), Term("outcome", Reinforce(length_normalize=True), weight=0.0)]
    ),
    credit_values={"normalize_adv": True},
)

PRESETS: Mapping[str, Preset] = {
    p.name: p
    for p in (
        reinforce,
        reinforce_baseline,
        grpo,
        dr_grpo,
        gspo,
        gmpo,
        cispo,
        sapo,
        scalerl,
        spo,
        sft,
        opd,
        mopd,
    )
}
"""The table: every preset by name (the names of ludic-core's ``ludic.algorithms`` entry points)."""
