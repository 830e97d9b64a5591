"""mopd (multi-teacher on-policy distillation, with an optional outcome-reward term) and the presets
registered by name (``ludic.algorithms`` entry points, ``ludic_core.registry.make_algorithm``)."""

from __future__ import annotations

import random

import pytest
import torch

from ludic_core.algorithms import PRESETS, Term, grpo, mopd, opd
from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.credit import ConstantCredit, GroupNormalizedReturn
from ludic_core.errors import ConfigError
from ludic_core.registry import ALGORITHMS, make_algorithm
from ludic_core.saw import SAWItem
from ludic_train.collate import collate_saw_items
from ludic_train.losses import CompositeLoss, ReinforceLoss, ReverseKLLoss, build_loss

VOCAB = 11


def items(seed: int) -> list[SAWItem]:
    """Four items of different lengths (two groups of two), each with teacher logprobs."""
    rng = random.Random(seed)
    out = []
    for k, (prompt, actions) in enumerate(((3, 4), (2, 2), (4, 5), (1, 3))):
        n = prompt + actions
        out.append(
            SAWItem(
                input_ids=[rng.randrange(1, VOCAB) for _ in range(n)],
                action_mask=[0] * prompt + [1] * actions,
                weight=(1.0, -1.0, 0.5, -0.5)[k],
                teacher_logps=[-rng.uniform(0.2, 4.0) for _ in range(actions)],
            )
        )
    return out


def reference_loss(
    logits: torch.Tensor, batch: dict[str, torch.Tensor], kl: float, outcome: float
) -> torch.Tensor:
    """``mean_b [kl·mean_t sg(log π − log π_T)·log π  −  outcome·A_b·mean_t log π]``: the gradient of
    both terms (the KL's score-function form) written out token by token."""
    logp = torch.log_softmax(logits.float(), -1)
    terms = []
    for b in range(logits.shape[0]):
        positions = [t for t in range(1, logits.shape[1]) if batch["action_mask"][b, t] > 0]
        token_logp = torch.stack([logp[b, t - 1, batch["input_ids"][b, t]] for t in positions])
        teacher = torch.stack([batch["teacher_logps"][b, t] for t in positions])
        kl_term = ((token_logp - teacher).detach() * token_logp).mean()
        pg_term = -batch["weight"][b] * token_logp.mean()
        terms.append(kl * kl_term + outcome * pg_term)
    return torch.stack(terms).mean()


def test_defaults_are_plain_on_policy_distillation_and_opd_is_that_preset() -> None:
    plain = mopd()
    assert plain.name == "mopd" and plain.preprocess is None
    assert plain.credit_assigner == ConstantCredit(1.0)
    assert build_loss(plain.loss) == ReverseKLLoss(coeff=1.0, length_normalize=True)
    assert plain.required_inputs == {"teacher_logps"}
    single = opd(coeff=0.3, length_normalize=False)
    assert single.name == "opd" and build_loss(single.loss) == ReverseKLLoss(
        coeff=0.3, length_normalize=False
    )
    assert single.credit_assigner == ConstantCredit(1.0)


def test_an_outcome_weight_adds_a_group_normalised_reinforce_term() -> None:
    algorithm = mopd(coeff=0.5, outcome_weight=2.0, group_size=4, length_normalize=False)
    assert algorithm.credit_assigner == GroupNormalizedReturn(group_size=4, normalize_adv=True)
    assert build_loss(algorithm.loss) == CompositeLoss(
        [
            Term("reverse_kl", ReverseKLLoss(coeff=0.5, length_normalize=False)),
            Term("outcome", ReinforceLoss(length_normalize=False), weight=2.0),
        ]
    )
    # REINFORCE on-policy needs no behaviour logprobs: the teachers' logprobs are all it asks for.
    assert algorithm.required_inputs == {"teacher_logps"}


@pytest.mark.parametrize(("kl", "outcome"), [(1.0, 0.0), (0.7, 0.5), (2.0, 3.0)])
def test_loss_and_gradient_are_the_kl_plus_the_weighted_outcome_term(kl: float, outcome: float) -> None:
    batch = collate_saw_items(items(seed=1), pad_token_id=0)
    logits = torch.randn(*batch["input_ids"].shape, VOCAB, generator=torch.Generator().manual_seed(2))
    logits.requires_grad_(True)
    algorithm = mopd(coeff=kl, outcome_weight=outcome, group_size=2)
    loss, stats = build_loss(algorithm.loss).compute(logits, batch)
    (grad,) = torch.autograd.grad(loss, logits)
    ref = reference_loss(logits, batch, kl, outcome)
    (ref_grad,) = torch.autograd.grad(ref, logits)
    assert torch.allclose(grad, ref_grad, atol=1e-6)
    # The loss's value is the reverse-KL estimate plus the outcome term's value.
    with torch.no_grad():
        logp = torch.log_softmax(logits, -1)[:, :-1].gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
        mask = batch["action_mask"][:, 1:]

        def per_token_mean(x: torch.Tensor) -> torch.Tensor:
            return (x * mask).sum(1) / mask.sum(1)

        kl_value = per_token_mean(logp - batch["teacher_logps"][:, 1:]).mean()
        pg_value = (-batch["weight"] * per_token_mean(logp)).mean()
    assert float(loss.detach()) == pytest.approx(float(kl * kl_value + outcome * pg_value), abs=1e-5)
    if outcome:
        assert float(stats["outcome/loss"]) == pytest.approx(float(pg_value), abs=1e-5)
        assert float(stats["reverse_kl/reverse_kl"]) == pytest.approx(
            float(((logp - batch["teacher_logps"][:, 1:]) * mask).sum() / mask.sum()), abs=1e-5
        )


def test_without_the_outcome_term_the_item_weights_do_not_matter() -> None:
    batch = collate_saw_items(items(seed=3), pad_token_id=0)
    logits = torch.randn(*batch["input_ids"].shape, VOCAB, generator=torch.Generator().manual_seed(4))
    logits.requires_grad_(True)
    loss = build_loss(mopd().loss)
    (grad,) = torch.autograd.grad(loss.compute(logits, batch)[0], logits)
    reweighted = dict(batch, weight=torch.tensor([5.0, -3.0, 0.0, 2.0]))
    (grad_reweighted,) = torch.autograd.grad(loss.compute(logits, reweighted)[0], logits)
    assert torch.equal(grad, grad_reweighted)
    with_outcome = build_loss(mopd(outcome_weight=1.0, group_size=2).loss)
    (grad_outcome,) = torch.autograd.grad(with_outcome.compute(logits, reweighted)[0], logits)
    assert not torch.allclose(grad_outcome, grad_reweighted)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"reverse_kl_weight": 0.0}, r"nothing to optimise"),
        ({"coeff": float("inf")}, r"ReverseKL.coeff must be a finite number, got inf"),
        ({"outcome_weight": float("nan"), "group_size": 2}, r"Term.weight must be a finite number, got nan"),
        ({"outcome_weight": -1.0}, r"term weights must be >= 0, got outcome_weight=-1.0"),
        (
            {"outcome_weight": 1.0, "group_size": 0},
            r"GroupNormalizedReturn.group_size must be an int >= 1 or None, got 0",
        ),
    ],
)
def test_bad_settings_name_the_field_and_value(kwargs: dict[str, float], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        mopd(**kwargs)  # type: ignore[arg-type]


def test_make_algorithm_builds_mopd_by_name() -> None:
    # By name the presets are torch-free specs; the torch algorithm is built from the same spec.
    built = make_algorithm("mopd", coeff=0.5, outcome_weight=0.25, group_size=8)
    assert isinstance(built, AlgorithmSpec)
    assert built == mopd(coeff=0.5, outcome_weight=0.25, group_size=8)
    assert make_algorithm("opd") == opd()
    assert make_algorithm("grpo", group_size=4) == grpo(group_size=4)


def test_every_preset_is_registered_under_its_name() -> None:
    assert {"grpo", "spo", "opd", "mopd"} <= set(PRESETS)
    for name, preset in PRESETS.items():
        assert name in ALGORITHMS.names(), f"{name} is not registered (ludic.algorithms entry point)"
        assert ALGORITHMS.get(name) is preset, name


async def test_the_trainer_reports_each_teachers_reverse_kl_from_the_batch_meta() -> None:
    from ludic_core.saw import SAWBatch
    from ludic_train.config import TrainerConfig
    from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
    from ludic_train.trainer import Trainer

    class OneBatch:
        async def next_batch(self) -> SAWBatch:
            # What TeacherScoredBatchSource writes into a scored batch's meta.
            meta = {"teacher_items/math": 3, "teacher_items/code": 1, "teacher_reverse_kl/math": 0.25}
            return SAWBatch(items=items(0), meta=meta)

    trainer = Trainer(
        model=tiny_causal_lm(bpe_tokenizer(), seed=0),
        algorithm=mopd(),
        batch_source=OneBatch(),
        config=TrainerConfig(pad_token_id=0, device="cpu", lr=1e-3, publish_every_steps=0),
    )
    [result] = await trainer.train(1)
    assert result["train/teacher_items/math"] == 3 and result["train/teacher_items/code"] == 1
    assert result["train/teacher_reverse_kl/math"] == 0.25
