"""Guarded training: bad SAW items are dropped and counted where they enter the trainer, and a step
whose loss or gradient norm is not finite is skipped (weights and optimiser state unchanged)."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
import torch
from test_trainer import PAD, ListSource, make_items
from torch import Tensor

from ludic_core.algorithms import LossSpec, sft
from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWItem
from ludic_train.config import TrainerConfig
from ludic_train.guards import check_items, model_vocab_size
from ludic_train.losses import build_loss
from ludic_train.losses.base import Stats
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer


@attrs.define
class NaNOnCalls(LossSpec):
    """Wraps a loss; the listed calls (1-based, one per micro-batch) return NaN."""

    inner: Any
    nan_calls: set[int]
    calls: int = 0
    required_inputs: frozenset[str] = frozenset()

    def compute(self, logits: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        loss, stats = self.inner.compute(logits, batch)
        self.calls += 1
        if self.calls in self.nan_calls:
            loss = loss * float("nan")
        return loss, stats


def _trainer(batches: list[list[SAWItem]], *, loss: Any = None, **cfg: Any) -> Trainer:
    algorithm = sft()
    if loss is not None:
        algorithm = attrs.evolve(algorithm, loss=loss)
    settings: dict[str, Any] = {
        "pad_token_id": PAD,
        "device": "cpu",
        "max_seq_len": 64,
        "micro_token_budget": 256,
        "publish_every_steps": 0,
        **cfg,
    }
    return Trainer(
        model=tiny_causal_lm(bpe_tokenizer(), seed=0),
        algorithm=algorithm,
        batch_source=ListSource(batches),
        config=TrainerConfig(**settings),
    )


def _params(trainer: Trainer) -> dict[str, Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def _assert_same(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def _optimizer_snapshot(trainer: Trainer) -> dict[str, Any]:
    return copy.deepcopy(trainer.optimizer.state_dict())


def _assert_same_optimizer(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for index, state in a["state"].items():
        for key, value in state.items():
            other = b["state"][index][key]
            if isinstance(value, Tensor):
                torch.testing.assert_close(value, other, rtol=0, atol=0)
            else:
                assert value == other


def test_a_nan_micro_batch_skips_the_step_and_training_continues(caplog: pytest.LogCaptureFixture) -> None:
    # micro_token_budget=64 splits each 8-item batch into several micro-batches; the second step's
    # first micro-batch is NaN, the others are fine: the accumulated gradient must still be dropped.
    batches = [make_items(8, seed=s) for s in range(3)]
    loss = NaNOnCalls(build_loss(sft().loss), nan_calls=set())
    trainer = _trainer(batches, loss=loss, micro_token_budget=64)
    first = trainer.train_sync(1)[0]
    assert first["train/skipped_steps"] == 0.0 and first["train/num_micro_batches"] > 1
    before, optim_before = _params(trainer), _optimizer_snapshot(trainer)

    loss.nan_calls = {loss.calls + 1}
    with caplog.at_level(logging.WARNING, logger="ludic"):
        skipped = trainer.train_sync(1)[0]
    assert skipped["train/skipped_steps"] == 1.0
    assert skipped["train/consecutive_skipped_steps"] == 1.0
    assert skipped["train/step"] == 2.0
    _assert_same(_params(trainer), before)
    _assert_same_optimizer(_optimizer_snapshot(trainer), optim_before)
    assert all(p.grad is None for p in trainer.model.parameters())
    assert (
        "trainer.step_skipped" in caplog.text
        and "step=2" in caplog.text
        and "nonfinite=['loss'" in caplog.text
    )

    resumed = trainer.train_sync(1)[0]
    assert resumed["train/skipped_steps"] == 0.0 and resumed["train/consecutive_skipped_steps"] == 0.0
    assert math.isfinite(resumed["train/loss"])
    after = _params(trainer)
    assert any(not torch.equal(after[n], before[n]) for n in before)


def test_a_huge_weight_gives_an_infinite_step_that_is_skipped() -> None:
    items = make_items(4, seed=1)
    items[2] = attrs.evolve(items[2], weight=1e300)  # finite, so the item passes; the loss overflows
    trainer = _trainer([items], max_grad_norm=0)
    before = _params(trainer)
    result = trainer.train_sync(1)[0]
    assert result["train/skipped_steps"] == 1.0
    assert not math.isfinite(result["train/loss"]) or not math.isfinite(result["train/grad_norm"])
    _assert_same(_params(trainer), before)


def test_consecutive_skips_raise_naming_the_setting() -> None:
    batches = [make_items(4, seed=s) for s in range(3)]
    trainer = _trainer(
        batches,
        loss=NaNOnCalls(build_loss(sft().loss), nan_calls=set(range(1, 100))),
        max_consecutive_skipped_steps=2,
    )
    before = _params(trainer)
    assert trainer.train_sync(1)[0]["train/skipped_steps"] == 1.0
    with pytest.raises(DataError, match=r"max_consecutive_skipped_steps=2 .*no update applied since step 0"):
        trainer.train_sync(1)
    _assert_same(_params(trainer), before)
    assert all(p.grad is None for p in trainer.model.parameters())


def test_max_consecutive_skipped_steps_is_validated() -> None:
    with pytest.raises(ConfigError, match="max_consecutive_skipped_steps must be an int >= 1, got 0"):
        TrainerConfig(pad_token_id=0, max_consecutive_skipped_steps=0)


def _bad(item: SAWItem, **fields: Any) -> SAWItem:
    # Values a queue or a decoder could hand over without going through SAWItem's validators.
    item = copy.copy(item)
    for name, value in fields.items():
        object.__setattr__(item, name, value)
    return item


def test_check_items_names_the_item_the_field_and_the_value() -> None:
    good = make_items(1, seed=0, logps=True)[0]
    n_actions = good.num_action_tokens
    cases = {
        "weight = inf is not finite": _bad(good, weight=math.inf),
        "actor_logps[0] = nan is not finite": _bad(good, actor_logps=(math.nan, *good.actor_logps[1:])),
        "actor_logps[0] = 0.5 is > 0": _bad(good, actor_logps=(0.5, *good.actor_logps[1:])),
        "teacher_logps[0] = -inf is not finite": _bad(good, teacher_logps=(-math.inf,) * n_actions),
        "input_ids[0] = 5000 is outside the model's vocabulary (size 1024)": _bad(
            good, input_ids=(5000, *good.input_ids[1:])
        ),
        "input_ids holds -1": _bad(good, input_ids=(-1, *good.input_ids[1:])),
        "action_mask has length 1 but input_ids has": _bad(good, action_mask=(1,)),
        "actor_logps has 1 entries but action_mask has": _bad(good, actor_logps=(-1.0,))
        if n_actions != 1
        else _bad(good, actor_logps=(-1.0, -1.0)),
    }
    kept, rejected = check_items([good, *cases.values()], vocab_size=1024)
    assert kept == [good]
    assert len(rejected) == len(cases)
    for index, (expected, message) in enumerate(zip(cases, rejected, strict=True), start=1):
        assert message.startswith(f"item {index} (rollout_id='r0')"), message
        assert expected in message, message
    # A tiny positive rounding error from the sampler is still a logprob.
    assert check_items([_bad(good, actor_logps=(1e-7,) * n_actions)], vocab_size=None)[1] == []


def test_model_vocab_size_reads_the_embedding() -> None:
    tokenizer = bpe_tokenizer()
    assert model_vocab_size(tiny_causal_lm(tokenizer, seed=0)) == len(tokenizer)
    assert model_vocab_size(torch.nn.Linear(2, 2)) is None


def test_invalid_items_are_dropped_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    items = make_items(4, seed=2, logps=True)
    items[1] = _bad(items[1], actor_logps=(math.nan,) * items[1].num_action_tokens)
    items[3] = _bad(items[3], input_ids=(99999, *items[3].input_ids[1:]))
    trainer = _trainer([items])
    with caplog.at_level(logging.WARNING, logger="ludic"):
        result = trainer.train_sync(1)[0]
    assert result["train/invalid_items_dropped"] == 2.0
    assert result["train/num_samples"] == 2.0
    assert result["train/skipped_steps"] == 0.0 and math.isfinite(result["train/loss"])
    assert "trainer.invalid_items_dropped" in caplog.text
    assert "rollout_id='r1'" in caplog.text and "actor_logps[0] = nan" in caplog.text
    assert "rollout_id='r3'" in caplog.text and "99999" in caplog.text


def test_a_batch_of_only_invalid_items_refills_then_errors() -> None:
    bad = [_bad(i, weight=math.nan) for i in make_items(2, seed=1)]
    trainer = _trainer([bad, bad], max_refills=2)
    with pytest.raises(DataError, match="4 invalid items dropped"):
        trainer.train_sync(1)
    good = make_items(2, seed=4)
    trainer = _trainer([bad, good], max_refills=2)
    result = trainer.train_sync(1)[0]
    assert result["train/invalid_items_dropped"] == 2.0 and result["train/num_samples"] == 2.0
