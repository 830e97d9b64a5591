"""The two ways a training step does less work without changing what it computes: a prompt prefix
every row shares runs once, and items of weight 0 are left out when the loss says they add nothing."""

from __future__ import annotations

import asyncio
import copy
import random

import pytest
import torch

from ludic_core.algorithms import Term, grpo
from ludic_core.saw import SAWBatch, SAWItem
from ludic_train.algorithm import TorchAlgorithm
from ludic_train.collate import collate_saw_items
from ludic_train.config import TrainerConfig
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
from ludic_train.policy_forward import MIN_SHARED_PREFIX, policy_logits, prefix_plan, shared_prefix_length
from ludic_train.testing import tiny_causal_lm
from ludic_train.trainer import Trainer

VOCAB = 200  # within the tiny models' vocabulary
PAD = 0
SYSTEM = list(range(40, 40 + 3 * MIN_SHARED_PREFIX))  # the prefix every item starts with


def _items(
    n: int, *, seed: int, weights: list[float] | None = None, shared: int = len(SYSTEM), vocab: int = VOCAB
) -> list[SAWItem]:
    """Items that begin with the same ``shared`` tokens, then a ragged private prompt and completion."""
    rng = random.Random(seed)
    items = []
    for k in range(n):
        prompt = [t % vocab for t in SYSTEM[:shared]] + [
            rng.randrange(1, vocab) for _ in range(rng.randint(2, 12))
        ]
        completion = [rng.randrange(1, vocab) for _ in range(rng.randint(1, 6))]
        items.append(
            SAWItem(
                input_ids=prompt + completion,
                action_mask=[0] * len(prompt) + [1] * len(completion),
                weight=rng.uniform(-1.5, 1.5) if weights is None else weights[k],
                meta={"rollout_id": f"r{k}"},
                actor_logps=[-rng.uniform(0.5, 3.0) for _ in completion],
                sampling_temperature=rng.choice([0.7, 1.0]),
            )
        )
    return items


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(params=["qwen2", "llama"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    lm = tiny_causal_lm(arch=request.param, seed=3)
    lm.train()
    return lm


def test_shared_prefix_length_stops_at_padding_divergence_and_first_logit() -> None:
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 5, 0], [1, 2, 3, 4, 0, 0]])
    mask = (ids != 0).long()
    assert shared_prefix_length(ids, mask, torch.tensor([4])) == 3  # row 1 differs at 3
    assert shared_prefix_length(ids, mask, torch.tensor([1, 4])) == 1  # the loss reads the logits at 1
    same = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
    # No logit read (no action tokens): nothing to share, even for identical rows.
    assert (
        shared_prefix_length(ids[:1].repeat(2, 1), mask[:1].repeat(2, 1), torch.tensor([], dtype=torch.long))
        == 0
    )
    # Identical rows with padding at the end: the prefix never covers padding.
    assert shared_prefix_length(same, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), torch.tensor([3])) == 3


def test_the_shared_prefix_pass_gives_the_full_pass_loss_and_gradient(model: torch.nn.Module) -> None:
    batch = collate_saw_items(_items(6, seed=1), pad_token_id=PAD)
    assert shared_prefix_length(batch["input_ids"], batch["attention_mask"], batch["logit_positions"]) >= (
        len(SYSTEM)
    )
    loss_fn = TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27, length_normalize=True)
    calls: list[tuple[int, int]] = []
    hook = model.model.register_forward_hook(
        lambda _m, args, kwargs, _out: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    results = []
    try:
        for share in (False, True):
            model.zero_grad(set_to_none=True)
            logits = policy_logits(model, batch, share_prefix=share)
            loss, _ = loss_fn.compute(logits, batch)
            loss.backward()
            results.append((logits.detach(), loss.detach(), _grads(model)))
    finally:
        hook.remove()
    rows, length = batch["input_ids"].shape
    # Unshared: one pass over everything. Shared: the prefix once, then only the suffixes.
    assert calls[0] == (rows, length)
    assert calls[1][0] == 1 and calls[1][1] >= len(SYSTEM)
    assert calls[2] == (rows, length - calls[1][1])
    (full_logits, full_loss, full_grads), (shared_logits, shared_loss, shared_grads) = results
    torch.testing.assert_close(shared_logits, full_logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(shared_loss, full_loss, rtol=1e-5, atol=1e-6)
    assert shared_grads.keys() == full_grads.keys()
    for name in full_grads:
        torch.testing.assert_close(shared_grads[name], full_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_lora_models_share_the_prefix_too(model: torch.nn.Module) -> None:
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    batch = collate_saw_items(_items(5, seed=2), pad_token_id=PAD)
    grads = []
    for share in (False, True):
        lora.zero_grad(set_to_none=True)
        loss, _ = TorchAlgorithm.from_spec(grpo(group_size=5)).compute_loss(lora, batch, share_prefix=share)
        loss.backward()
        grads.append(_grads(lora))
    assert grads[0] and grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_short_common_prefix_runs_one_ordinary_pass(model: torch.nn.Module) -> None:
    batch = collate_saw_items(_items(4, seed=3, shared=MIN_SHARED_PREFIX - 1), pad_token_id=PAD)
    calls: list[int] = []
    hook = model.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        policy_logits(model, batch, share_prefix=True)
    finally:
        hook.remove()
    assert calls == [1]


INERT = {
    "grpo": TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27),
    "gspo": SequenceClippedSurrogateLoss(clip_eps_low=3e-4, clip_eps_high=4e-4),
    "cispo": CISPOLoss(),
    "gmpo": GMPOLoss(),
    "sapo": SAPOLoss(),
    "reinforce": ReinforceLoss(),
    "sft": MaskedCrossEntropyLoss(),
    "tis": TruncatedISCorrection(ReinforceLoss(), level="token", cap=2.0),
    "composite": CompositeLoss([Term("a", CISPOLoss()), Term("b", ReinforceLoss(), weight=0.5)]),
}
NOT_INERT = {
    "kl": TokenKLLoss(coeff=0.1),
    "entropy": EntropyBonus(),
    "opd": ReverseKLLoss(),
    "composite_with_kl": CompositeLoss([Term("pg", CISPOLoss()), Term("kl", TokenKLLoss(coeff=0.1))]),
}


@pytest.mark.parametrize("name", sorted(INERT) + sorted(NOT_INERT))
def test_zero_weight_items_are_inert_exactly_when_the_loss_says_so(name: str) -> None:
    """The claim checked on values: the loss of a batch with some weights set to 0 equals the loss of
    the other items alone scaled by their share, and so does its gradient — or the loss says it is
    not inert."""
    loss_fn = {**INERT, **NOT_INERT}[name]
    assert loss_fn.zero_weight_items_inert() == (name in INERT)
    if name not in INERT:
        return
    targets = _items(6, seed=4, weights=[0.8, 0.0, -1.1, 0.0, 0.4, 0.0], vocab=40)
    torch.manual_seed(0)
    logits = torch.randn(6, max(len(i) for i in targets), 40, dtype=torch.float64, requires_grad=True)
    whole = collate_saw_items(targets, pad_token_id=PAD)
    loss, _ = loss_fn.compute(logits, whole)
    (grad,) = torch.autograd.grad(loss, logits)
    kept = [k for k, i in enumerate(targets) if i.weight != 0.0]
    part = collate_saw_items([targets[k] for k in kept], pad_token_id=PAD)
    part_logits = logits[kept][:, : part["input_ids"].shape[1]]
    part_loss, _ = loss_fn.compute(part_logits, part)
    (part_grad,) = torch.autograd.grad(part_loss * len(kept) / len(targets), logits)
    torch.testing.assert_close(part_loss * len(kept) / len(targets), loss)
    torch.testing.assert_close(part_grad, grad)


class _Repeat:
    def __init__(self, items: list[SAWItem]) -> None:
        self.items = items

    async def next_batch(self) -> SAWBatch:
        return SAWBatch(items=list(self.items))


def _train(
    model: torch.nn.Module,
    items: list[SAWItem],
    *,
    fast: bool,
    steps: int = 2,
    budget: int = 64,
    optimizer: str = "adamw",
) -> tuple[list, Trainer]:
    trainer = Trainer(
        model=model,
        algorithm=grpo(group_size=len(items)),
        batch_source=_Repeat(items),
        config=TrainerConfig(
            pad_token_id=PAD,
            lr=1e-2,
            publish_every_steps=0,
            micro_token_budget=budget,
            optimizer=optimizer,
            max_seq_len=64,
            share_prompt_prefix=fast,
            skip_zero_weight_items=fast,
        ),
    )
    return asyncio.run(trainer.train(steps)), trainer


def test_a_trainer_step_that_skips_and_shares_updates_the_weights_as_one_that_does_neither(
    model: torch.nn.Module,
) -> None:
    items = _items(8, seed=5, weights=[0.9, 0.0, -0.7, 0.0, 0.0, 1.2, -1.4, 0.0])
    runs = {}
    for fast in (False, True):
        torch.manual_seed(0)
        runs[fast] = _train(copy.deepcopy(model), items, fast=fast)
    (slow_results, slow), (fast_results, fast_trainer) = runs[False], runs[True]
    for before, after in zip(slow_results, fast_results, strict=True):
        assert (
            after["train/zero_weight_items_skipped"] == 4.0
            and before["train/zero_weight_items_skipped"] == 0.0
        )
        assert after["train/num_samples"] == before["train/num_samples"] == 8.0
        assert after["train/loss"] == pytest.approx(before["train/loss"], rel=1e-4, abs=1e-6)
        assert after["train/grad_norm"] == pytest.approx(before["train/grad_norm"], rel=1e-4)
        assert after["train/num_tokens"] < before["train/num_tokens"]
    for (name, p), q in zip(slow.model.named_parameters(), fast_trainer.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=name)


def test_a_batch_of_zero_weights_runs_no_forward_pass_yet_steps_the_optimiser_as_before(
    model: torch.nn.Module,
) -> None:
    """AdamW keeps moving on a zero gradient (its first moment) and decays the weights; a skipped
    batch must do the same, not leave the parameters out of the step."""
    mixed = _items(4, seed=6)
    zeros = _items(4, seed=7, weights=[0.0] * 4)
    trained = {}
    for fast in (False, True):
        trainer = _train(copy.deepcopy(model), mixed, fast=fast, steps=1)[1]
        trainer.batch_source = _Repeat(zeros)
        calls: list[int] = []
        hook = trainer.model.register_forward_hook(lambda *_, seen=calls: seen.append(1))
        try:
            (result,) = asyncio.run(trainer.train(1))
        finally:
            hook.remove()
        assert (not calls) if fast else calls
        assert result["train/grad_norm"] == 0.0 and result["train/skipped_steps"] == 0.0
        trained[fast] = trainer.model
    for p, q in zip(trained[False].parameters(), trained[True].parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-7)


def test_a_loss_that_is_not_inert_trains_on_every_item(model: torch.nn.Module) -> None:
    from ludic_core.algorithms import AlgorithmSpec
    from ludic_core.credit import ConstantCredit

    items = _items(4, seed=8, weights=[0.0, 1.0, 0.0, 1.0])
    trainer = Trainer(
        model=model,
        algorithm=AlgorithmSpec(name="kl", credit_assigner=ConstantCredit(), loss=TokenKLLoss(coeff=0.1)),
        batch_source=_Repeat(items),
        config=TrainerConfig(pad_token_id=PAD, publish_every_steps=0, max_seq_len=64, micro_token_budget=64),
    )
    (result,) = asyncio.run(trainer.train(1))
    assert result["train/zero_weight_items_skipped"] == 0.0


def test_identical_rows_without_action_tokens_run_one_ordinary_pass(model: torch.nn.Module) -> None:
    """Nothing to score means no logit position to stop the prefix at: the rows are not split."""
    tokens = list(range(5, 5 + 2 * MIN_SHARED_PREFIX))
    item = SAWItem(input_ids=tokens, action_mask=[0] * len(tokens), weight=1.0, meta={})
    batch = collate_saw_items([item, item, item], pad_token_id=PAD)
    logits = policy_logits(model, batch, share_prefix=True)
    assert logits.shape[:2] == (3, batch["logit_positions"].numel())


def _group_items(groups: int, replies: int, *, seed: int) -> list[SAWItem]:
    """GRPO-shaped items: ``groups`` prompts of 40 random tokens, each answered ``replies`` times; a
    group's rows share their whole prompt, different groups nothing, and the groups are interleaved.
    Every prompt has the same length (as a board game's do), so sorting by length does not group them."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, VOCAB) for _ in range(40)] for _ in range(groups)]
    items = []
    for k in range(replies):
        for g, prompt in enumerate(prompts):
            completion = [rng.randrange(1, VOCAB) for _ in range(rng.randint(1, 5))]
            items.append(
                SAWItem(
                    input_ids=prompt + completion,
                    action_mask=[0] * len(prompt) + [1] * len(completion),
                    weight=rng.uniform(-1.5, 1.5),
                    meta={"rollout_id": f"g{g}r{k}"},
                    actor_logps=[-rng.uniform(0.5, 3.0) for _ in completion],
                )
            )
    return items


def test_a_groups_replies_train_together_running_their_prompt_once(model: torch.nn.Module) -> None:
    """Packing a group's replies into one micro-batch makes their whole prompt the shared prefix:
    the step runs far fewer tokens and updates the weights as the unshared step does."""
    items = _group_items(3, 4, seed=9)
    runs = {}
    for fast in (False, True):
        torch.manual_seed(0)
        tokens: list[int] = []
        lm = copy.deepcopy(model)
        hook = lm.model.register_forward_hook(
            lambda _m, _a, kwargs, _out, seen=tokens: seen.append(kwargs["input_ids"].numel()),
            with_kwargs=True,
        )
        try:
            # SGD: the update is the gradient itself (Adam's first step is its sign, which rounding flips
            # where a gradient is nearly 0).
            results, trainer = _train(lm, items, fast=fast, steps=1, budget=256, optimizer="sgd")
        finally:
            hook.remove()
        runs[fast] = (results[0], trainer, sum(tokens))
    (slow, slow_trainer, slow_tokens), (fast, fast_trainer, fast_tokens) = runs[False], runs[True]
    assert fast["train/loss"] == pytest.approx(slow["train/loss"], rel=1e-4, abs=1e-6)
    assert fast["train/grad_norm"] == pytest.approx(slow["train/grad_norm"], rel=1e-4)
    # Each group's prompt runs once instead of four times (packed by length, no prefix is shared).
    assert fast_tokens < slow_tokens / 2
    for (name, p), q in zip(
        slow_trainer.model.named_parameters(), fast_trainer.model.parameters(), strict=True
    ):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=name)


def test_the_prefix_plan_runs_each_groups_prompt_once_or_the_common_header_once() -> None:
    grouped = collate_saw_items(_group_items(3, 4, seed=10), pad_token_id=PAD)
    plan = prefix_plan(grouped["input_ids"], grouped["attention_mask"], grouped["logit_positions"])
    assert plan is not None and plan.prefixes.shape == (3, 39)  # three prompts, all but their last token
    rows = grouped["input_ids"]
    assert torch.equal(plan.prefixes[plan.row_prefix], rows[:, :39])
    # Rows that share only a header: the header runs once.
    header = collate_saw_items(_items(6, seed=1), pad_token_id=PAD)
    plan = prefix_plan(header["input_ids"], header["attention_mask"], header["logit_positions"])
    assert plan is not None and plan.prefixes.shape[0] == 1 and plan.length >= len(SYSTEM)
    assert not plan.row_prefix.any()
    # Nothing shared: no plan.
    alone = collate_saw_items(_items(4, seed=3, shared=0), pad_token_id=PAD)
    assert prefix_plan(alone["input_ids"], alone["attention_mask"], alone["logit_positions"]) is None
