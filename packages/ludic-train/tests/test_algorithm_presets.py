"""The torch side of the presets (TorchAlgorithm), preprocessing: defaults, required inputs, macro-batch baseline, compute_loss."""

from __future__ import annotations

import random

import attrs
import pytest
import torch

from ludic_core.algorithms import (
    AlgorithmSpec,
    Term,
    cispo,
    dr_grpo,
    gmpo,
    grpo,
    gspo,
    opd,
    reinforce,
    reinforce_baseline,
    sapo,
    scalerl,
    sft,
    with_truncated_is,
)
from ludic_core.algorithms.preprocess import (
    ComposedPreprocess,
    DropZeroWeight,
    SubtractBaseline,
    compose_preprocess,
)
from ludic_core.credit import ConstantCredit, GroupNormalizedReturn, HybridNormalizedReturn, MonteCarloReturn
from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWBatch, SAWItem
from ludic_train.algorithm import TorchAlgorithm
from ludic_train.collate import collate_saw_items
from ludic_train.losses import (
    CISPOLoss,
    CompositeLoss,
    GMPOLoss,
    MaskedCrossEntropyLoss,
    ReinforceLoss,
    ReverseKLLoss,
    SAPOLoss,
    SequenceClippedSurrogateLoss,
    TokenClippedSurrogateLoss,
    TokenKLLoss,
    TruncatedISCorrection,
)
from ludic_train.losses.build import build_loss
from ludic_train.microbatch import collate_micro_batches, micro_loss_scale

T = TorchAlgorithm.from_spec

PAD = 0


def item(
    rng: random.Random, length: int, weight: float, *, actor: bool = True, teacher: bool = False
) -> SAWItem:
    prompt = max(1, length // 3)
    n = length - prompt
    return SAWItem(
        input_ids=[rng.randrange(1, 40) for _ in range(length)],
        action_mask=[0] * prompt + [1] * n,
        weight=weight,
        actor_logps=[-rng.uniform(0.5, 3) for _ in range(n)] if actor else None,
        teacher_logps=[-rng.uniform(0.5, 3) for _ in range(n)] if teacher else None,
    )


def test_preset_defaults_match_the_original() -> None:
    expected = {
        "reinforce": (reinforce(), MonteCarloReturn(gamma=1.0), ReinforceLoss(), None),
        "reinforce_baseline": (
            reinforce_baseline(),
            MonteCarloReturn(gamma=1.0),
            ReinforceLoss(),
            SubtractBaseline(normalize=False),
        ),
        "grpo": (
            grpo(group_size=4),
            GroupNormalizedReturn(group_size=4, normalize_adv=True),
            TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27, length_normalize=False),
            None,
        ),
        "dr_grpo": (
            dr_grpo(group_size=4),
            GroupNormalizedReturn(group_size=4, normalize_adv=False),
            TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27, length_normalize=False),
            None,
        ),
        "gspo": (
            gspo(group_size=4),
            GroupNormalizedReturn(group_size=4, normalize_adv=True),
            SequenceClippedSurrogateLoss(clip_eps_low=3e-4, clip_eps_high=4e-4, length_normalize=True),
            None,
        ),
        "gmpo": (
            gmpo(group_size=4),
            GroupNormalizedReturn(group_size=4, normalize_adv=True),
            GMPOLoss(clip_eps_low=0.4, clip_eps_high=0.4, length_normalize=True),
            None,
        ),
        "cispo": (
            cispo(group_size=4),
            GroupNormalizedReturn(group_size=4, normalize_adv=True),
            CISPOLoss(clip_eps_low=1e6, clip_eps_high=0.2, length_normalize=True),
            None,
        ),
        "sapo": (
            sapo(group_size=4),
            GroupNormalizedReturn(group_size=4, normalize_adv=True),
            SAPOLoss(tau_pos=1.0, tau_neg=1.05, length_normalize=False),
            None,
        ),
        "scalerl": (
            scalerl(group_size=4),
            HybridNormalizedReturn(group_size=4),
            CISPOLoss(clip_eps_low=0.2, clip_eps_high=0.28, length_normalize=True),
            DropZeroWeight(1e-4),
        ),
        "sft": (sft(), ConstantCredit(1.0), MaskedCrossEntropyLoss(length_normalize=False), None),
        "opd": (opd(), ConstantCredit(1.0), ReverseKLLoss(coeff=1.0, length_normalize=True), None),
    }
    for name, (algo, credit, loss, preprocess) in expected.items():
        assert algo.name == name
        assert algo.credit_assigner == credit, name
        assert build_loss(algo.loss) == loss, name
        assert algo.preprocess == preprocess, name


def test_required_inputs_per_preset() -> None:
    ppo_family = [grpo, dr_grpo, gspo, gmpo, cispo, sapo, scalerl]
    for factory in ppo_family:
        assert factory(group_size=2).required_inputs == {"actor_logps"}, factory.__name__
    assert reinforce().required_inputs == frozenset()
    assert reinforce_baseline().required_inputs == frozenset()
    assert sft().required_inputs == frozenset()
    assert reinforce(importance_sampling="sequence").required_inputs == {"actor_logps"}
    assert opd().required_inputs == {"teacher_logps"}


def test_validate_names_missing_fields_and_items() -> None:
    rng = random.Random(0)
    batch = SAWBatch([item(rng, 6, 1.0), item(rng, 6, 1.0, actor=False), item(rng, 6, -1.0, actor=False)])
    with pytest.raises(DataError, match=r"'grpo'.*actor_logps .* missing on 2 of 3 items: \[1, 2\]"):
        T(grpo(group_size=2)).validate(batch)
    with pytest.raises(DataError, match=r"'opd'.*teacher_logps .* missing on 3 of 3 items"):
        T(opd()).validate(batch)
    T(reinforce()).validate(batch)  # plain REINFORCE trains on data without behaviour logprobs
    T(sft()).validate(batch)


def test_plain_reinforce_trains_on_offline_items_without_logps() -> None:
    rng = random.Random(1)
    items = [item(rng, 7, w, actor=False) for w in (1.0, -0.5)]
    batch = collate_saw_items(items, pad_token_id=PAD)
    logits = torch.randn(2, 7, 40, generator=torch.Generator().manual_seed(0), requires_grad=True)
    loss, _ = build_loss(reinforce().loss).compute(logits, batch)
    loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_drop_zero_weight_runs_before_validation() -> None:
    rng = random.Random(2)
    batch = SAWBatch([item(rng, 6, 1.0), item(rng, 6, 0.0, actor=False), item(rng, 6, 5e-5, actor=False)])
    prepared = T(grpo(group_size=2, drop_zero_weight=True)).prepare(batch)
    assert [i.weight for i in prepared.items] == [1.0]
    assert prepared.meta["num_dropped_zero_weight"] == 2
    with pytest.raises(DataError):
        T(grpo(group_size=2)).prepare(batch)
    assert len(T(scalerl(group_size=2)).prepare(batch).items) == 1


def test_reinforce_baseline_is_the_macro_batch_mean() -> None:
    """The baseline comes from the whole macro-batch, so micro-batching does not change the gradient
    (the original subtracted each micro-batch's own mean)."""
    rng = random.Random(3)
    weights = [3.0, 1.0, -2.0, 0.5, 4.0, -1.5]
    items = [item(rng, n, w, actor=False) for n, w in zip((4, 5, 9, 10, 14, 15), weights, strict=True)]
    algo = T(reinforce_baseline())
    prepared = algo.prepare(SAWBatch(items, meta={"source": "test"}))
    mean = sum(weights) / len(weights)
    assert [i.weight for i in prepared.items] == pytest.approx([w - mean for w in weights])
    assert prepared.meta["baseline"] == pytest.approx(mean)
    assert prepared.meta["source"] == "test"

    vocab = 40
    table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def gradient(micro_budget: int) -> torch.Tensor:
        logits_table = table.clone().requires_grad_(True)
        micro = collate_micro_batches(
            prepared.items, pad_token_id=PAD, micro_token_budget=micro_budget, max_seq_len=15
        )
        for m in micro:
            logits = logits_table[m.tensors["input_ids"]]  # a bigram "model": logits depend on the token
            loss, _ = algo.loss.compute(logits, m.tensors)
            (loss * micro_loss_scale(m.num_items, len(prepared.items))).backward()
        assert logits_table.grad is not None
        return logits_table.grad

    torch.testing.assert_close(gradient(30), gradient(15 * 6))
    normalized = T(reinforce_baseline(normalize=True)).prepare(SAWBatch(items))
    ws = [i.weight for i in normalized.items]
    assert sum(ws) == pytest.approx(0.0, abs=1e-12)
    assert (sum(w * w for w in ws) / len(ws)) ** 0.5 == pytest.approx(1.0, abs=1e-6)


def test_compose_preprocess_keeps_order() -> None:
    rng = random.Random(4)
    batch = SAWBatch([item(rng, 5, w) for w in (1.0, 1.0, 4.0)])
    # baseline first: weights become (-1, -1, 2); nothing is zero, nothing dropped
    first = compose_preprocess(SubtractBaseline(), DropZeroWeight(0.5))
    assert isinstance(first, ComposedPreprocess)
    assert [i.weight for i in first(batch).items] == [-1.0, -1.0, 2.0]
    # drop first with a large eps: only the 4.0 survives, then the baseline zeroes it
    second = compose_preprocess(DropZeroWeight(1.5), None, SubtractBaseline())
    assert second is not None
    assert [i.weight for i in second(batch).items] == [0.0]
    assert compose_preprocess(None) is None
    with pytest.raises(ConfigError, match="eps"):
        DropZeroWeight(-1.0)


def test_compute_loss_runs_one_forward_pass_on_a_real_model() -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=PAD,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    rng = random.Random(5)
    batch = collate_saw_items([item(rng, 8, 1.0), item(rng, 5, -1.0)], pad_token_id=PAD)
    algo = T(grpo(group_size=2))
    calls = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    loss, stats = algo.compute_loss(model, batch, cast_logits_to_fp32=True)
    handle.remove()
    assert calls == [1]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert model.model.embed_tokens.weight.grad is not None
    assert set(stats) >= {"loss", "ratio_mean", "clip_frac", "adv_mean"}


def test_with_truncated_is_wraps_the_loss() -> None:
    algo = with_truncated_is(reinforce(), level="token", cap=3.0)
    assert build_loss(algo.loss) == TruncatedISCorrection(ReinforceLoss(), level="token", cap=3.0)
    assert algo.required_inputs == {"actor_logps"}
    assert with_truncated_is(gspo(group_size=2), level="sequence").required_inputs == {"actor_logps"}
    with pytest.raises(ConfigError, match="level='sequence'"):
        with_truncated_is(gmpo(group_size=2), level="token")


def test_reinforce_with_the_length_normalised_is_ratio() -> None:
    # The original Ludic's ReinforceLoss(length_normalize=True): ratio exp(mean_t log r_t), no cap.
    algo = reinforce(length_normalize=True, importance_sampling="sequence_geomean", is_cap=None)
    assert build_loss(algo.loss) == TruncatedISCorrection(
        ReinforceLoss(length_normalize=True), level="sequence_geomean", cap=None
    )
    assert algo.required_inputs == {"actor_logps"}
    wrapped = with_truncated_is(reinforce(), level="sequence_geomean", cap=1.5)
    assert build_loss(wrapped.loss) == TruncatedISCorrection(
        ReinforceLoss(), level="sequence_geomean", cap=1.5
    )


def test_scalerl_with_kl_is_a_composite() -> None:
    loss = build_loss(scalerl(group_size=2, kl_weight=0.05).loss)
    assert isinstance(loss, CompositeLoss)
    assert [t.name for t in loss.terms] == ["cispo", "kl"]
    assert loss.terms[1] == Term("kl", TokenKLLoss(coeff=1.0, length_normalize=True), weight=0.05)
    with pytest.raises(ConfigError, match="kl_weight"):
        scalerl(group_size=2, kl_weight=-1.0)


def test_algorithm_rejects_unknown_required_inputs() -> None:
    with pytest.raises(ConfigError, match=r"unknown required_inputs \['values'\]"):
        AlgorithmSpec("x", ConstantCredit(), ReinforceLoss(), required_inputs={"values"})
    with pytest.raises(ConfigError, match="collection of field names"):
        AlgorithmSpec("x", ConstantCredit(), ReinforceLoss(), required_inputs="actor_logps")
    custom = attrs.evolve(sft(), required_inputs={"actor_logps"})
    with pytest.raises(DataError, match="actor_logps"):
        T(custom).validate(SAWBatch([item(random.Random(0), 5, 1.0, actor=False)]))
