"""One algorithm spec (ludic_core.algorithms), two backends: the local ludic-train Trainer and the
TinkerTrainer (fake service) both train a step from the same preset, and per token the objective Tinker
is sent (its loss, clip thresholds and each datum's advantages or weights) has the value and the
gradient of the torch loss ludic-train builds from that spec, inside and outside the clip band. Specs
Tinker has no built-in for are refused by name."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import pytest
import torch
from torch import Tensor

from ludic_core.algorithms import (
    GMPO,
    SAPO,
    AlgorithmSpec,
    ClippedSurrogate,
    Composite,
    Reinforce,
    ReverseKL,
    Term,
    TruncatedIS,
    cispo,
    dr_grpo,
    gmpo,
    grpo,
    gspo,
    mopd,
    reinforce,
    sft,
    with_truncated_is,
)
from ludic_core.credit import credit_signature
from ludic_core.errors import ConfigError
from ludic_core.saw import SAWBatch, SAWItem
from ludic_tinker import TinkerTrainer, supported_loss_fns, tinker_loss_for
from ludic_tinker.datums import datum_parts
from ludic_tinker.testing import FakeTinkerService
from ludic_tinker.testing.model import datum_loss
from ludic_train.collate import collate_saw_items
from ludic_train.config import TrainerConfig
from ludic_train.losses import TokenClippedSurrogateLoss, build_loss
from ludic_train.losses.base import SequenceLoss, TokenLogpContext
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

PAD = 0


class OneBatch:
    def __init__(self, items: list[SAWItem]) -> None:
        self.items = items

    async def next_batch(self) -> SAWBatch:
        return SAWBatch(list(self.items))


def _items() -> list[SAWItem]:
    # Different lengths and action counts (length normalisation matters), both advantage signs, and a
    # tool output between two action spans. Byte-level ids, valid for the fake model and the BPE one.
    return [
        SAWItem(
            input_ids=[72, 73, 74, 100, 101, 80, 81, 102],
            action_mask=[0, 0, 0, 1, 1, 0, 0, 1],
            weight=1.0,
            actor_logps=[-5.1, -5.2, -5.3],
        ),
        SAWItem(
            input_ids=[72, 73, 74, 110, 2],
            action_mask=[0, 0, 0, 1, 1],
            weight=-0.5,
            actor_logps=[-5.4, -5.5],
        ),
        SAWItem(
            input_ids=[75, 76, 120, 121, 122, 123],
            action_mask=[0, 0, 1, 1, 1, 1],
            weight=0.25,
            actor_logps=[-4.0, -4.5, -5.0, -5.5],
        ),
    ]


class GivenLogps(TokenLogpContext):
    """The shared token context with the learner's per-token logprobs given instead of computed from
    logits, so the torch loss and Tinker's objective can be differentiated at the same logprobs."""

    def __init__(self, token_logp: Tensor, batch: Mapping[str, Tensor]) -> None:
        batch_size, length = batch["input_ids"].shape
        super().__init__(torch.zeros(batch_size, length, 1, dtype=torch.float64), batch)
        self._given = token_logp

    @property
    def token_logp(self) -> Tensor:
        return self._given


def _learner_logps(items: list[SAWItem], shift: float) -> list[Tensor]:
    """Per item, learner logprobs on Tinker's datum positions: the sampler's plus ``shift`` times a
    spread of offsets (0: on-policy; 1: ratios from about 0.6 to 1.6, across every clip band here)."""
    offsets = [-0.5, 0.45, -0.05, 0.3, -0.25, 0.1, 0.2, -0.4, 0.0]
    out = []
    for i, item in enumerate(items):
        parts = datum_parts(item, i, need_logprobs=False)
        p = torch.zeros(len(parts.model_input), dtype=torch.float64)
        for k, pos in enumerate(parts.action_positions):
            p[pos] = (item.actor_logps or [])[k] + shift * offsets[(i + k) % len(offsets)]
        out.append(p.requires_grad_())
    return out


def _torch_value_and_grads(
    spec: AlgorithmSpec, items: list[SAWItem], learner: list[Tensor]
) -> tuple[float, list[Tensor]]:
    loss = build_loss(spec.loss)
    assert isinstance(loss, SequenceLoss)
    batch = collate_saw_items(items, pad_token_id=PAD)
    token_logp = torch.zeros(
        batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1, dtype=torch.float64
    )
    for b, p in enumerate(learner):
        token_logp[b, : len(p)] = p.detach()  # unpadded items: datum position t is grid position t
    token_logp.requires_grad_()
    per_sequence, _ = loss.sequence_terms(GivenLogps(token_logp, batch), batch)
    value = per_sequence.mean()
    value.backward()
    assert token_logp.grad is not None
    return float(value.detach()), [token_logp.grad[b, : len(p)] for b, p in enumerate(learner)]


def _tinker_value_and_grads(call: object, learner: list[Tensor]) -> tuple[float, list[Tensor]]:
    total = torch.zeros((), dtype=torch.float64)
    for p, inputs in zip(learner, call.loss_fn_inputs, strict=True):  # type: ignore[attr-defined]
        as_tensors = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in inputs.items()}
        total = total + datum_loss(call.loss_fn, p, as_tensors, call.loss_fn_config)  # type: ignore[attr-defined]
    total.backward()
    return float(total.detach()), [p.grad for p in learner]  # type: ignore[misc]


SPECS = {
    "grpo": grpo(group_size=3),
    "cispo": cispo(group_size=3),
    "sft": sft(),
    "sft_length_normalized": sft(length_normalize=True),
    "gspo": gspo(group_size=3),
}


@pytest.mark.parametrize("name", list(SPECS))
async def test_one_spec_trains_on_both_backends_with_the_same_per_token_objective(
    name: str, training_client, fake_service: FakeTinkerService
) -> None:
    spec = SPECS[name]
    try:
        expected = tinker_loss_for(spec)
    except ConfigError as exc:
        # An older SDK without the loss (gspo before 0.34) refuses the spec up front, saying so; the
        # `tinker` session runs this test on both SDK versions.
        assert "the installed tinker SDK" in str(exc), exc
        pytest.skip(str(exc))
    if expected.loss_fn not in supported_loss_fns():
        pytest.skip(f"the installed tinker SDK has no {expected.loss_fn!r} loss")
    items = _items()

    # Tinker: one step from the spec.
    tinker_trainer = TinkerTrainer.from_algorithm(training_client, OneBatch(items), spec)
    [tinker_result] = await tinker_trainer.train(1)
    [call] = fake_service.forward_backward_calls
    assert call.loss_fn == expected.loss_fn
    assert call.loss_fn_config == pytest.approx(dict(expected.config))
    if isinstance(spec.loss, ClippedSurrogate):
        assert call.loss_fn_config == pytest.approx(
            {
                "clip_low_threshold": 1 - spec.loss.clip_eps_low,
                "clip_high_threshold": 1 + spec.loss.clip_eps_high,
            }
        )

    # Local: one step from the same spec.
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    local = Trainer(
        model=model,
        algorithm=spec,
        batch_source=OneBatch(items),
        config=TrainerConfig(pad_token_id=PAD, device="cpu", lr=1e-2, publish_every_steps=0),
    )
    [local_result] = await local.train(1)
    assert local.algorithm == spec
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(), strict=True))
    for result in (tinker_result, local_result):
        assert result["train/step"] == 1 and torch.isfinite(torch.tensor(result["train/loss"]))

    # Per token, at the sampler's logprobs and off-policy: the same value and gradient.
    for shift in (0.0, 1.0):
        torch_value, torch_grads = _torch_value_and_grads(spec, items, _learner_logps(items, shift))
        tinker_value, tinker_grads = _tinker_value_and_grads(call, _learner_logps(items, shift))
        assert tinker_value == pytest.approx(torch_value, rel=1e-5, abs=1e-9), shift
        for b, (mine, theirs) in enumerate(zip(torch_grads, tinker_grads, strict=True)):
            assert theirs.tolist() == pytest.approx(mine.tolist(), rel=1e-5, abs=1e-9), (shift, b)
    # On-policy, each action token's loss input is minus its gradient: the item's weight, normalised.
    _, on_policy = _torch_value_and_grads(spec, items, _learner_logps(items, 0.0))
    key = "weights" if expected.loss_fn == "cross_entropy" else "advantages"
    for inputs, grad in zip(call.loss_fn_inputs, on_policy, strict=True):
        assert inputs[key].tolist() == pytest.approx((-grad).tolist(), abs=1e-7)


def test_a_torch_loss_given_as_the_spec_is_refused_by_name() -> None:
    # A torch loss is a loss spec the Trainer runs as it is; Tinker has no built-in for it.
    with pytest.raises(ConfigError, match="TokenClippedSurrogateLoss"):
        tinker_loss_for(TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27))


def test_reinforce_is_importance_sampling() -> None:
    assert tinker_loss_for(reinforce()).loss_fn == "importance_sampling"
    assert (
        tinker_loss_for(with_truncated_is(reinforce(), level="token", cap=None)).loss_fn
        == "importance_sampling"
    )
    assert tinker_loss_for(reinforce(length_normalize=True)).normalization == "token_mean_per_sequence"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (gmpo(group_size=2), "GMPO.*geometric-mean ratio clipped in log space"),
        (SAPO(), "SAPO.*sigmoid"),
        (mopd(), "ReverseKL.*teacher logprobs"),
        (Composite([Term("a", Reinforce()), Term("b", ReverseKL())]), "Composite.*weighted sum"),
        (grpo(group_size=2, ratio_clip=3.0), r"ratio_clip=3\.0"),
        (
            ClippedSurrogate(level="sequence", clip_eps_low=0.1, clip_eps_high=0.1, length_normalize=False),
            "without length_normalize is their product",
        ),
        (
            with_truncated_is(grpo(group_size=2)),
            r"TruncatedIS.*level='token', cap=2\.0 around ClippedSurrogate",
        ),
        (TruncatedIS(GMPO(), level="sequence"), "TruncatedIS"),
    ],
)
def test_specs_without_a_tinker_builtin_are_refused_by_name(spec: object, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as error:
        tinker_loss_for(spec)  # type: ignore[arg-type]
    assert "CustomLoss" in str(error.value)


def test_from_algorithm_refuses_what_is_not_a_spec(training_client) -> None:
    with pytest.raises(ConfigError, match=r"expected an AlgorithmSpec .* got str"):
        TinkerTrainer.from_algorithm(training_client, OneBatch(_items()), "grpo")  # type: ignore[arg-type]


async def test_both_trainers_refuse_items_weighted_by_another_credit_assigner(training_client) -> None:
    # Items credited for GRPO handed to a Dr. GRPO spec: either backend would silently train them as
    # if Dr. GRPO's credit had run.
    grpo_spec, dr_grpo_spec = grpo(), dr_grpo()
    stamped = [
        attrs.evolve(item, meta={**item.meta, "credit": credit_signature(grpo_spec.credit_assigner)})
        for item in _items()
    ]
    expected = credit_signature(dr_grpo_spec.credit_assigner)
    with pytest.raises(ConfigError, match="assigns credit with") as caught:
        await TinkerTrainer.from_algorithm(training_client, OneBatch(stamped), dr_grpo_spec).train(1)
    assert expected in str(caught.value) and "'dr_grpo'" in str(caught.value)
    local = Trainer(
        model=tiny_causal_lm(bpe_tokenizer(), seed=0),
        algorithm=dr_grpo_spec,
        batch_source=OneBatch(stamped),
        config=TrainerConfig(pad_token_id=0, device="cpu", max_seq_len=64, publish_every_steps=0),
    )
    with pytest.raises(ConfigError, match="assigns credit with"):
        await local.train(1)
