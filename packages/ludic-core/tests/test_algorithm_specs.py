"""Algorithm specs (ludic_core.algorithms): validation naming field and value, required inputs derived
from the loss, the presets' defaults as data, and the presets by name without torch."""

from __future__ import annotations

import math
import sys

import pytest

from ludic_core.algorithms import (
    CISPO,
    GMPO,
    AlgorithmSpec,
    ClippedSurrogate,
    Composite,
    CrossEntropy,
    DropZeroWeight,
    Reinforce,
    ReverseKL,
    SubtractBaseline,
    Term,
    TokenKL,
    TruncatedIS,
    cispo,
    grpo,
    gspo,
    mopd,
    reinforce,
    reinforce_baseline,
    scalerl,
    sft,
    with_truncated_is,
)
from ludic_core.credit import ConstantCredit, GroupNormalizedReturn, HybridNormalizedReturn
from ludic_core.errors import ConfigError
from ludic_core.registry import make_algorithm


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ClippedSurrogate(level="word", clip_eps_low=0.2, clip_eps_high=0.2), r"ClippedSurrogate\.level .*'word'"),  # type: ignore[arg-type]
        (lambda: ClippedSurrogate(level="token", clip_eps_low=0.0, clip_eps_high=0.2), r"ClippedSurrogate\.clip_eps_low .* > 0, got 0\.0"),
        (lambda: ClippedSurrogate(level="token", clip_eps_low=0.2, clip_eps_high=0.2, ratio_clip=-1.0), r"ratio_clip .* got -1\.0"),
        (lambda: CISPO(clip_eps_high=math.nan), r"CISPO\.clip_eps_high .* got nan"),
        (lambda: CISPO(length_normalize=1), r"CISPO\.length_normalize must be true or false, got 1"),  # type: ignore[arg-type]
        (lambda: TokenKL(coeff=math.inf), r"TokenKL\.coeff must be a finite number, got inf"),
        (lambda: TruncatedIS(Reinforce(), cap=0.0), r"TruncatedIS\.cap .* got 0\.0"),
        (lambda: TruncatedIS(Reinforce(), level="batch"), r"TruncatedIS\.level .*'batch'"),  # type: ignore[arg-type]
        (lambda: TruncatedIS(GMPO(), level="token"), r"GMPO is sequence-level; use level='sequence'"),
        (lambda: TruncatedIS("reinforce"), r"TruncatedIS\.inner must be a LossSpec, got str"),  # type: ignore[arg-type]
        (lambda: Composite([]), r"Composite\.terms must not be empty"),
        (lambda: Composite([Term("a", Reinforce()), Term("a", CrossEntropy())]), r"repeated: \['a'\]"),
        (lambda: Term("a/b", Reinforce()), r"Term\.name .*'a/b'"),
        (lambda: AlgorithmSpec("x", ConstantCredit(1.0), loss="ce"), r"loss must be a LossSpec .* got str"),  # type: ignore[arg-type]
        (lambda: AlgorithmSpec("", ConstantCredit(1.0), CrossEntropy()), r"AlgorithmSpec\.name .*''"),
        (
            lambda: AlgorithmSpec("x", ConstantCredit(1.0), CrossEntropy(), required_inputs={"values"}),
            r"unknown required_inputs \['values'\]",
        ),
        (
            lambda: AlgorithmSpec("x", ConstantCredit(1.0), ReverseKL(), required_inputs=set()),
            r"leave out \['teacher_logps'\], which the loss ReverseKL reads",
        ),
    ],
)  # fmt: skip
def test_bad_specs_name_the_field_and_the_value(build, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=message):
        build()


def test_required_inputs_come_from_the_loss() -> None:
    assert sft().required_inputs == frozenset()
    assert reinforce().required_inputs == frozenset()
    assert reinforce(importance_sampling="sequence").required_inputs == {"actor_logps"}
    assert grpo(group_size=2).required_inputs == {"actor_logps"}
    assert mopd().required_inputs == {"teacher_logps"}
    assert mopd(outcome_weight=0.5, group_size=4).required_inputs == {"teacher_logps"}
    assert scalerl(group_size=2, kl_weight=0.1).required_inputs == {"actor_logps"}
    assert with_truncated_is(sft(), level="sequence").required_inputs == {"actor_logps"}
    assert AlgorithmSpec(
        "x", ConstantCredit(1.0), CrossEntropy(), required_inputs={"actor_logps"}
    ).required_inputs == {"actor_logps"}


def test_presets_are_data_with_the_original_defaults() -> None:
    assert grpo(group_size=4) == AlgorithmSpec(
        "grpo",
        GroupNormalizedReturn(group_size=4, normalize_adv=True),
        ClippedSurrogate(level="token", clip_eps_low=0.2, clip_eps_high=0.27, length_normalize=False),
    )
    assert gspo(group_size=4).loss == ClippedSurrogate(
        level="sequence", clip_eps_low=3e-4, clip_eps_high=4e-4, length_normalize=True
    )
    assert cispo(group_size=4).loss == CISPO(clip_eps_low=1e6, clip_eps_high=0.2, length_normalize=True)
    assert sft() == AlgorithmSpec("sft", ConstantCredit(1.0), CrossEntropy(length_normalize=False))
    assert reinforce_baseline().preprocess == SubtractBaseline(normalize=False)
    assert scalerl(group_size=4) == AlgorithmSpec(
        "scalerl",
        HybridNormalizedReturn(group_size=4),
        CISPO(clip_eps_low=0.2, clip_eps_high=0.28, length_normalize=True),
        preprocess=DropZeroWeight(1e-4),
    )
    assert scalerl(group_size=4, kl_weight=0.1).loss == Composite(
        [Term("cispo", CISPO(clip_eps_low=0.2, clip_eps_high=0.28)), Term("kl", TokenKL(), weight=0.1)]
    )
    assert with_truncated_is(grpo(group_size=4), cap=3.0).loss == TruncatedIS(
        grpo(group_size=4).loss, cap=3.0
    )


def test_preset_arguments_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"ClippedSurrogate\.clip_eps_high .* got -0\.1"):
        grpo(group_size=2, clip_eps_high=-0.1)
    with pytest.raises(ConfigError, match=r"kl_weight=-1\.0"):
        scalerl(group_size=2, kl_weight=-1.0)
    with pytest.raises(
        ConfigError, match=r"grpo: unknown option\(s\) \['clip'\]; it takes \[.*'clip_eps_high'"
    ):
        grpo(clip=0.2)
    with pytest.raises(ConfigError, match=r"group_size must be an int >= 1 or None, got 0"):
        grpo(group_size=0)
    with pytest.raises(ConfigError, match="level='sequence'"):
        with_truncated_is(gspo(group_size=2))


def test_group_presets_choose_the_clamp_order() -> None:
    for preset in (grpo, gspo, cispo):
        credit = preset(positive_only=True, clamp_order="before_normalize").credit_assigner
        assert credit == GroupNormalizedReturn(
            normalize_adv=True, positive_only=True, clamp_order="before_normalize"
        )
    with pytest.raises(ConfigError, match="clamp_order='before_normalize' only applies with"):
        grpo(clamp_order="before_normalize")


def test_distillation_alone_needs_no_groups_and_an_outcome_term_brings_them() -> None:
    assert mopd(group_size=4).credit_assigner == ConstantCredit()
    assert mopd(outcome_weight=0.5).credit_assigner == GroupNormalizedReturn(normalize_adv=True)
    assert mopd(outcome_weight=0.5, length_normalize=False).loss == Composite(
        [
            Term("reverse_kl", ReverseKL(length_normalize=False)),
            Term("outcome", Reinforce(length_normalize=False), weight=0.5),
        ]
    )
    with pytest.raises(ConfigError, match="nothing to optimise"):
        mopd(reverse_kl_weight=0.0)


def test_every_preset_keyword_sets_one_part() -> None:
    from ludic_core.algorithms.presets import PRESETS, _init_fields, _loss_options

    for preset in PRESETS.values():
        credit = _init_fields(preset.credit)
        loss = _loss_options(preset.loss)
        baseline = _init_fields(SubtractBaseline) if preset.baseline is not None else set()
        assert not credit & loss and not credit & baseline and not loss & baseline, preset.name


def test_presets_by_name_are_specs_and_import_no_torch() -> None:
    built = make_algorithm("grpo", group_size=8)
    assert isinstance(built, AlgorithmSpec) and built == grpo(group_size=8)
    assert make_algorithm("sft") == sft()
    assert "torch" not in sys.modules
