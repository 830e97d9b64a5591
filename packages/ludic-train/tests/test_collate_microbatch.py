"""Collation, token-budget micro-batching, truncation, and the macro/micro gradient equality."""

from __future__ import annotations

import itertools
import random
from array import array

import attrs
import pytest
import torch

from ludic_core.algorithms import Term
from ludic_core.errors import ConfigError, DataError
from ludic_core.packed_saw import UINT32, PackedSAWItem
from ludic_core.saw import SAWItem
from ludic_train.collate import collate_saw_items
from ludic_train.losses import (
    CISPOLoss,
    CompositeLoss,
    EntropyBonus,
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
from ludic_train.losses.base import SequenceLoss
from ludic_train.microbatch import (
    collate_micro_batches,
    micro_loss_scale,
    split_items_by_token_budget,
    truncate_item,
)

PAD = 0


def make_item(
    rng: random.Random, length: int, *, vocab: int = 48, logps: bool = True, weight: float | None = None
) -> SAWItem:
    prompt = rng.randint(1, max(1, length // 2))
    action_mask = [0] * prompt + [1] * (length - prompt)
    if length - prompt > 4:  # a masked tool observation between two turns
        action_mask[prompt + 2] = 0
    n_actions = sum(action_mask)
    return SAWItem(
        input_ids=[rng.randrange(1, vocab) for _ in range(length)],
        action_mask=action_mask,
        weight=rng.uniform(-2, 2) if weight is None else weight,
        meta={"completion_length": n_actions, "prompt_length": prompt},
        actor_logps=[-rng.uniform(0.5, 4.0) for _ in range(n_actions)] if logps else None,
        teacher_logps=[-rng.uniform(0.5, 4.0) for _ in range(n_actions)] if logps else None,
    )


def make_items(n: int, *, seed: int, lengths: tuple[int, int] = (3, 24)) -> list[SAWItem]:
    rng = random.Random(seed)
    return [make_item(rng, rng.randint(*lengths)) for _ in range(n)]


# --- collation --------------------------------------------------------------------------------------


def test_collate_pads_right_and_scatters_logps_onto_action_positions() -> None:
    items = [
        SAWItem(
            input_ids=[5, 6, 7, 8],
            action_mask=[0, 1, 0, 1],
            weight=2.0,
            actor_logps=[-0.5, -1.5],
            teacher_logps=[-0.25, -0.75],
        ),
        SAWItem(
            input_ids=[9, 10],
            action_mask=[0, 1],
            weight=-1.0,
            actor_logps=[-2.0],
            teacher_logps=[-3.0],
        ),
    ]
    batch = collate_saw_items(items, pad_token_id=3)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 3, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["action_mask"].tolist() == [[0, 1, 0, 1], [0, 1, 0, 0]]
    assert batch["weight"].tolist() == [2.0, -1.0]
    assert batch["actor_logps"].tolist() == [[0, -0.5, 0, -1.5], [0, -2.0, 0, 0]]
    assert batch["old_logp_action"].tolist() == [-2.0, -2.0]
    assert batch["teacher_logps"].tolist() == [[0, -0.25, 0, -0.75], [0, -3.0, 0, 0]]
    assert batch["input_ids"].dtype == torch.long and batch["attention_mask"].dtype == torch.long
    assert batch["action_mask"].dtype == torch.float32 and batch["weight"].dtype == torch.float32


def reference_collate(items: list[SAWItem], pad: int) -> dict[str, torch.Tensor]:
    """Collation written token by token, the obvious way: what the vectorised one must equal."""
    length = max(len(i) for i in items)
    out = {
        "input_ids": torch.tensor([[*i.input_ids] + [pad] * (length - len(i)) for i in items]),
        "attention_mask": torch.tensor([[1] * len(i) + [0] * (length - len(i)) for i in items]),
        "action_mask": torch.tensor(
            [[float(m) for m in i.action_mask] + [0.0] * (length - len(i)) for i in items]
        ),
        "weight": torch.tensor([i.weight for i in items], dtype=torch.float32),
        "logit_positions": torch.tensor(
            sorted({t - 1 for i in items for t in range(1, len(i)) if i.action_mask[t]}), dtype=torch.long
        ),
    }
    for field in ("actor_logps", "teacher_logps"):
        if getattr(items[0], field) is None:
            continue
        rows = []
        for item in items:
            values = iter(getattr(item, field))
            rows.append([next(values) if m else 0.0 for m in item.action_mask] + [0.0] * (length - len(item)))
        out[field] = torch.tensor(rows, dtype=torch.float32)
    return out


def packed(item: SAWItem) -> SAWItem:
    """The same item as the SAW builder makes it: arrays packed, read back on first access."""
    runs = [len(list(group)) for _, group in itertools.groupby(item.action_mask)]
    return PackedSAWItem.from_arrays(
        input_ids=array(UINT32, item.input_ids),
        action_runs=runs if item.action_mask[0] == 0 else [0, *runs],
        weight=item.weight,
        meta=item.meta,
        actor_logps=None if item.actor_logps is None else array("d", item.actor_logps),
        teacher_logps=None if item.teacher_logps is None else array("d", item.teacher_logps),
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("logps", [True, False])
def test_collate_equals_the_token_by_token_reference(seed: int, logps: bool) -> None:
    rng = random.Random(seed)
    items = [make_item(rng, rng.randint(2, 40), vocab=200_000, logps=logps) for _ in range(rng.randint(1, 9))]
    # Items of tuples and packed items (as the SAW builder makes them) mixed.
    items = [packed(item) if i % 2 else item for i, item in enumerate(items)]
    batch = collate_saw_items(items, pad_token_id=PAD)
    expected = reference_collate(items, PAD)
    for key, tensor in expected.items():
        assert batch[key].dtype == tensor.dtype, key
        assert torch.equal(batch[key], tensor), key
    assert set(batch) == set(expected) | {"temperature"} | ({"old_logp_action"} if logps else set())


@pytest.mark.parametrize("vocab", [200, 60_000, 200_000])  # 1-, 2- and 4-byte ids on the wire
def test_collate_of_items_decoded_from_the_pipeline_equals_the_reference(vocab: int) -> None:
    wire = pytest.importorskip("ludic_core.pipeline.wire")
    rng = random.Random(vocab)
    # Logprobs exact in float32 (the wire's type), so the decoded items equal the sent ones.
    sent = [
        attrs.evolve(
            item,
            actor_logps=[float(torch.tensor(v).float()) for v in item.actor_logps or ()],
            teacher_logps=None,
            meta={**item.meta, "policy_version": 0},
        )
        for item in (make_item(rng, rng.randint(2, 40), vocab=vocab) for _ in range(7))
    ]
    message = wire.BatchMessage(items=tuple(sent), actor_id="a", batch_index=0, created_at=0.0)
    decoded = list(wire.decode_message(wire.encode_message(message)).items)
    assert decoded == sent
    batch = collate_saw_items(decoded, pad_token_id=PAD)
    for key, tensor in reference_collate(sent, PAD).items():
        assert torch.equal(batch[key], tensor), key


def test_collate_without_logps_has_no_logp_keys() -> None:
    rng = random.Random(0)
    batch = collate_saw_items([make_item(rng, 5, logps=False)], pad_token_id=PAD)
    assert set(batch) == {
        "input_ids",
        "attention_mask",
        "action_mask",
        "weight",
        "temperature",
        "logit_positions",
    }


def test_collate_gives_each_row_its_temperature_and_the_positions_that_predict_actions() -> None:
    def item(action_mask: list[int], temperature: float | None) -> SAWItem:
        n = len(action_mask)
        return SAWItem(
            input_ids=list(range(1, n + 1)),
            action_mask=action_mask,
            weight=1.0,
            sampling_temperature=temperature,
        )

    items = [item([0, 0, 1, 1], 0.7), item([0, 1], None), item([0, 0, 0, 0, 0, 1], 0.0), item([0, 1, 0], 1.3)]
    batch = collate_saw_items(items, pad_token_id=PAD)
    # Unknown and greedy (0) rows are scored untempered: that is what their logprobs are.
    assert batch["temperature"].tolist() == pytest.approx([0.7, 1.0, 1.0, 1.3])
    assert batch["temperature"].dtype == torch.float32
    # Logits at t score token t+1: the union over rows of {t : action_mask[t+1] == 1}, sorted.
    assert batch["logit_positions"].tolist() == [0, 1, 2, 4]
    assert batch["logit_positions"].dtype == torch.long


def test_an_item_without_action_tokens_collates_under_a_float64_default_dtype() -> None:
    # Its logprob row is empty; built with the default dtype it would not fit a float32 batch tensor.
    items = [
        SAWItem(input_ids=[1, 2, 3], action_mask=[0, 0, 0], weight=0.0, actor_logps=[], teacher_logps=[]),
        SAWItem(
            input_ids=[1, 2, 3],
            action_mask=[0, 1, 1],
            weight=1.0,
            actor_logps=[-0.5, -1.0],
            teacher_logps=[-0.1, -0.2],
        ),
    ]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        batch = collate_saw_items(items, pad_token_id=0)
    finally:
        torch.set_default_dtype(previous)
    assert batch["actor_logps"].dtype == torch.float32
    assert batch["actor_logps"].tolist() == [[0.0, 0.0, 0.0], [0.0, -0.5, -1.0]]
    assert batch["teacher_logps"][0].tolist() == [0.0, 0.0, 0.0]


def test_collate_errors() -> None:
    rng = random.Random(0)
    with pytest.raises(DataError, match="empty"):
        collate_saw_items([], pad_token_id=PAD)
    mixed = [make_item(rng, 6), make_item(rng, 6, logps=False)]
    with pytest.raises(DataError, match=r"actor_logps .* items \[1\] of 2"):
        collate_saw_items(mixed, pad_token_id=PAD)
    first_is_action = SAWItem(input_ids=[1, 2], action_mask=[1, 1], weight=1.0)
    with pytest.raises(DataError, match=r"items \[0\] have action_mask\[0\] == 1"):
        collate_saw_items([first_is_action], pad_token_id=PAD)
    with pytest.raises(DataError, match="pad_token_id"):
        collate_saw_items([make_item(rng, 4)], pad_token_id=-1)


# --- splitting ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("budget", "max_len"), [(24, 24), (40, 16), (100, 24), (1000, 30)])
def test_split_respects_budget_and_keeps_every_item(seed: int, budget: int, max_len: int) -> None:
    items = make_items(17, seed=seed)
    chunks = split_items_by_token_budget(items, micro_token_budget=budget, max_seq_len=max_len)
    assert all(max(len(i) for i in chunk) * len(chunk) <= budget for chunk in chunks)
    flat = [item for chunk in chunks for item in chunk]
    assert len(flat) == len(items)
    assert all(len(item) <= max_len for item in flat)
    assert sorted(i.input_ids for i in flat) == sorted(truncate_item(i, max_len).input_ids for i in items)
    lengths = [len(i) for i in flat]
    assert lengths == sorted(lengths)  # packed in ascending length order


def test_split_packs_greedily_by_padded_size() -> None:
    rng = random.Random(0)
    items = [make_item(rng, n) for n in (10, 3, 4, 9, 4)]
    chunks = split_items_by_token_budget(items, micro_token_budget=20, max_seq_len=10)
    # sorted: 3 4 4 9 10 → [3,4,4] (4×3=12 ≤ 20; adding 9 would cost 36), [9,10] (10×2=20)
    assert [[len(i) for i in chunk] for chunk in chunks] == [[3, 4, 4], [9, 10]]


def test_an_item_longer_than_the_budget_trains_alone() -> None:
    rng = random.Random(0)
    items = [make_item(rng, n) for n in (3, 4, 12, 5)]
    chunks = split_items_by_token_budget(items, micro_token_budget=10, max_seq_len=16)
    assert [[len(i) for i in chunk] for chunk in chunks] == [[3, 4], [5], [12]]


def test_split_validates_its_arguments() -> None:
    items = make_items(3, seed=0)
    with pytest.raises(ConfigError, match="max_seq_len must be an int >= 1, got 0"):
        split_items_by_token_budget(items, micro_token_budget=8, max_seq_len=0)
    assert split_items_by_token_budget([], micro_token_budget=8, max_seq_len=8) == []
    assert collate_micro_batches([], pad_token_id=PAD, micro_token_budget=8, max_seq_len=8) == []


def test_truncation_cuts_logps_and_records_meta() -> None:
    item = SAWItem(
        input_ids=list(range(1, 11)),
        action_mask=[0, 0, 0, 1, 1, 0, 1, 1, 1, 1],
        weight=1.0,
        meta={"completion_length": 6, "prompt_length": 3},
        actor_logps=[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0],
    )
    cut = truncate_item(item, 7)
    assert cut.input_ids == tuple(range(1, 8))
    assert cut.action_mask == (0, 0, 0, 1, 1, 0, 1)
    assert cut.actor_logps == (-1.0, -2.0, -3.0)
    assert cut.teacher_logps is None
    assert cut.meta == {
        "completion_length": 3,
        "prompt_length": 4,
        "seq_len_truncated": True,
        "seq_len_original": 10,
        "seq_len_retained": 7,
        "seq_len_retained_frac": 0.7,
        "truncated": True,
        "truncation_reason": "max_seq_len",
    }
    already = attrs_evolve_meta(item, {"truncated": True, "truncation_reason": "env"})
    assert truncate_item(already, 7).meta["truncation_reason"] == "env"
    assert truncate_item(item, 10) is item


def attrs_evolve_meta(item: SAWItem, meta: dict) -> SAWItem:
    import attrs

    return attrs.evolve(item, meta={**item.meta, **meta})


def test_micro_batches_carry_counts() -> None:
    items = make_items(9, seed=4)
    micro = collate_micro_batches(items, pad_token_id=PAD, micro_token_budget=48, max_seq_len=24)
    assert sum(m.num_items for m in micro) == 9
    assert sum(m.num_tokens for m in micro) == sum(len(i) for i in items)
    assert sum(m.num_truncated for m in micro) == 0
    cut = collate_micro_batches(items, pad_token_id=PAD, micro_token_budget=48, max_seq_len=12)
    assert sum(m.num_truncated for m in cut) == sum(1 for i in items if len(i) > 12) > 0
    assert sum(m.num_tokens for m in cut) == sum(min(len(i), 12) for i in items)
    for m in micro:
        assert m.tensors["input_ids"].shape[0] == m.num_items
        assert m.padded_tokens <= 48
        assert int(m.tensors["attention_mask"].sum()) == m.num_tokens


def test_micro_loss_scale() -> None:
    assert micro_loss_scale(3, 12) == 0.25
    with pytest.raises(ConfigError, match="micro_items"):
        micro_loss_scale(0, 4)
    with pytest.raises(ConfigError, match="cannot exceed"):
        micro_loss_scale(5, 4)


# --- macro-batch gradient == sum of scaled micro-batch gradients --------------------------------------


@pytest.fixture(scope="module")
def tiny_model() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=PAD,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    return model.double().eval()  # float64: padding changes matmul shapes, keep round-off out of the way


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _loss_on(model: torch.nn.Module, loss: SequenceLoss, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"]).logits
    return loss.compute(logits, tensors)[0]


GRADIENT_LOSSES = {
    "reinforce": ReinforceLoss(),
    "grpo": TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27, length_normalize=True),
    "gspo": SequenceClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.3, length_normalize=True),
    "gmpo": GMPOLoss(),
    "cispo": CISPOLoss(),
    "sapo": SAPOLoss(),
    "sft": MaskedCrossEntropyLoss(),
    "opd": ReverseKLLoss(),
    "tis_token": TruncatedISCorrection(ReinforceLoss(), level="token", cap=2.0),
    "tis_sequence": TruncatedISCorrection(
        TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27), level="sequence", cap=2.0
    ),
    "composite": CompositeLoss(
        [Term("pg", CISPOLoss()), Term("kl", TokenKLLoss(coeff=0.1)), Term("ent", EntropyBonus())]
    ),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_LOSSES))
def test_macro_batch_gradient_equals_sum_of_scaled_micro_batch_gradients(
    tiny_model: torch.nn.Module, name: str
) -> None:
    loss = GRADIENT_LOSSES[name]
    items = make_items(13, seed=7)
    tiny_model.zero_grad(set_to_none=True)
    whole = collate_saw_items(items, pad_token_id=PAD)
    _loss_on(tiny_model, loss, whole).backward()
    macro = _gradients(tiny_model)

    tiny_model.zero_grad(set_to_none=True)
    micro = collate_micro_batches(items, pad_token_id=PAD, micro_token_budget=60, max_seq_len=24)
    assert len(micro) >= 3 and len({m.tensors["input_ids"].shape[1] for m in micro}) >= 3
    for batch in micro:
        (_loss_on(tiny_model, loss, batch.tensors) * micro_loss_scale(batch.num_items, len(items))).backward()
    summed = _gradients(tiny_model)

    assert macro.keys() == summed.keys() and macro
    for key in macro:
        torch.testing.assert_close(summed[key], macro[key], rtol=1e-9, atol=1e-12, msg=key)
    assert any(g.abs().max() > 1e-6 for g in macro.values())


# --- logits only at the positions the loss reads ------------------------------------------------------


class _NoLogitsToKeep(torch.nn.Module):
    """A model whose forward takes no ``logits_to_keep``: the trainer must fall back to full logits."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits


def _float32_copy(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model).float()


@pytest.mark.parametrize("name", sorted(GRADIENT_LOSSES))
def test_logits_at_action_positions_give_the_full_logits_loss_and_gradient(
    tiny_model: torch.nn.Module, name: str
) -> None:
    from ludic_core.algorithms import AlgorithmSpec
    from ludic_core.credit import ConstantCredit
    from ludic_train.algorithm import TorchAlgorithm, accepts_logits_to_keep

    model = _float32_copy(tiny_model)
    algorithm = TorchAlgorithm.from_spec(
        AlgorithmSpec(name=name, credit_assigner=ConstantCredit(), loss=GRADIENT_LOSSES[name])
    )
    items = [
        attrs.evolve(item, sampling_temperature=t)
        for item, t in zip(
            make_items(6, seed=3, lengths=(12, 24)), [0.7, 1.0, 0.0, None, 0.5, 0.7], strict=True
        )
    ]
    batch = collate_saw_items(items, pad_token_id=PAD)
    seen: list[tuple[int, ...]] = []
    hook = model.lm_head.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    try:
        results = []
        for forward in (model, _NoLogitsToKeep(model)):
            model.zero_grad(set_to_none=True)
            loss, stats = algorithm.compute_loss(forward, batch)
            loss.backward()
            results.append((loss.detach(), stats, _gradients(model)))
    finally:
        hook.remove()
    assert accepts_logits_to_keep(model) and not accepts_logits_to_keep(_NoLogitsToKeep(model))
    num_positions = batch["logit_positions"].numel()
    assert num_positions < batch["input_ids"].shape[1] - 1  # the prompt positions really are skipped
    assert seen == [(6, num_positions, 32), (6, batch["input_ids"].shape[1], 32)]
    (kept, kept_stats, kept_grads), (full, full_stats, full_grads) = results
    # Not bit-identical: the lm-head matmul runs on fewer rows, which may change its blocking.
    torch.testing.assert_close(kept, full, rtol=0, atol=1e-6)
    for key in full_stats:
        torch.testing.assert_close(kept_stats[key], full_stats[key], rtol=1e-5, atol=1e-6, msg=key)
    assert kept_grads.keys() == full_grads.keys()
    for key in full_grads:
        torch.testing.assert_close(kept_grads[key], full_grads[key], rtol=1e-4, atol=1e-6, msg=key)


def test_lora_models_get_logits_at_action_positions_too(tiny_model: torch.nn.Module) -> None:
    pytest.importorskip("peft")
    from peft import LoraConfig, PrefixTuningConfig, get_peft_model

    from ludic_core.algorithms import grpo
    from ludic_train.algorithm import TorchAlgorithm, accepts_logits_to_keep

    lora = get_peft_model(_float32_copy(tiny_model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert accepts_logits_to_keep(lora)
    batch = collate_saw_items(make_items(4, seed=5, lengths=(10, 20)), pad_token_id=PAD)
    seen: list[int] = []
    lm_head = lora.get_base_model().lm_head
    hook = lm_head.register_forward_hook(lambda _m, args, _out: seen.append(args[0].shape[1]))
    try:
        TorchAlgorithm.from_spec(grpo(group_size=2)).compute_loss(lora, batch)[0].backward()
    finally:
        hook.remove()
    assert seen == [batch["logit_positions"].numel()]
    # Virtual tokens would shift every position: such adapters get full logits (and the loss's shape check).
    prefix = get_peft_model(
        _float32_copy(tiny_model), PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=2)
    )
    assert not accepts_logits_to_keep(prefix)


def _replies(prompt: list[int], lengths: list[int], rng: random.Random) -> list[SAWItem]:
    return [
        SAWItem(
            input_ids=prompt + [rng.randrange(1, 50) for _ in range(n)],
            action_mask=[0] * len(prompt) + [1] * n,
            weight=1.0,
        )
        for n in lengths
    ]


def test_grouped_prompts_pack_each_groups_replies_together_under_the_shared_cost() -> None:
    rng = random.Random(0)
    prompt_a = [rng.randrange(1, 50) for _ in range(30)]
    prompt_b = [rng.randrange(1, 50) for _ in range(24)]
    group_a = _replies(prompt_a, [3, 5, 2, 4, 6, 1], rng)
    group_b = _replies(prompt_b, [2, 2, 3], rng)
    alone = make_items(4, seed=1)  # prompts nobody shares
    items = [*alone[:2], *group_a[:3], *group_b, *group_a[3:], *alone[2:]]
    budget = 60
    chunks = split_items_by_token_budget(items, micro_token_budget=budget, max_seq_len=64, group_prompts=True)
    flat = [item for chunk in chunks for item in chunk]
    assert sorted(i.input_ids for i in flat) == sorted(i.input_ids for i in items)
    for chunk in chunks:
        prompts = {tuple(i.input_ids[: i.action_mask.index(1)]) for i in chunk}
        if chunk[0] not in alone:  # a group's chunk: its prompt once, then each reply
            assert len(prompts) == 1
            shared = len(next(iter(prompts))) - 1
            assert shared + max(len(i) - shared for i in chunk) * len(chunk) <= budget
        else:
            assert all(i in alone for i in chunk)
            assert max(len(i) for i in chunk) * len(chunk) <= budget
    # Packed by length alone, no chunk of the groups' items would hold more than two of them.
    assert max(len(c) for c in chunks) >= 5
    plain = split_items_by_token_budget(items, micro_token_budget=budget, max_seq_len=64)
    assert plain == split_items_by_token_budget(
        items, micro_token_budget=budget, max_seq_len=64, group_prompts=False
    )


def test_a_prompt_too_short_to_share_is_packed_by_length() -> None:
    rng = random.Random(0)
    group = _replies([7, 8, 9], [2, 3, 4], rng)
    grouped = split_items_by_token_budget(group, micro_token_budget=20, max_seq_len=16, group_prompts=True)
    assert grouped == split_items_by_token_budget(group, micro_token_budget=20, max_seq_len=16)


def test_groups_with_prompts_of_one_length_share_a_chunk_each_prompt_counted_once() -> None:
    rng = random.Random(1)
    groups = [_replies([rng.randrange(1, 50) for _ in range(20)], [2, 3, 2, 4], rng) for _ in range(3)]
    items = [item for k in range(4) for item in (g[k] for g in groups)]  # interleaved
    chunks = split_items_by_token_budget(items, micro_token_budget=90, max_seq_len=64, group_prompts=True)
    # Each prompt's 19 shared tokens once, plus each row's 3-5 tokens after them, padded to the
    # longest: two groups fit in 90 (2 × 19 + 8 × 5 = 78), three would not (57 + 12 × 5 = 117).
    assert [len({tuple(i.input_ids[:19]) for i in c}) for c in chunks] == [2, 1]
    for chunk in chunks:
        prompts = {tuple(i.input_ids[:19]) for i in chunk}
        assert len(prompts) * 19 + len(chunk) * (max(len(i) for i in chunk) - 19) <= 90
    assert sorted(i.input_ids for c in chunks for i in c) == sorted(i.input_ids for i in items)
