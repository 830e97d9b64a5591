"""Trainer behaviour on synthetic SAW batches with a tiny real model."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from ludic_core.algorithms import grpo, sft
from ludic_core.batch_sources import OfflineBatchSource
from ludic_core.errors import ConfigError, DataError
from ludic_core.loggers.jsonl import JsonlLogger
from ludic_core.saw import SAWBatch, SAWItem
from ludic_core.saw_io import write_saw_jsonl
from ludic_train.config import TrainerConfig
from ludic_train.sft import load_sft_items, sft_batch_source
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

PAD = 0


def make_items(
    n: int, *, seed: int, vocab: int = 600, logps: bool = False, version: int | None = None
) -> list[SAWItem]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        prompt, completion = rng.randint(3, 20), rng.randint(1, 12)
        ids = [rng.randrange(5, vocab) for _ in range(prompt + completion)]
        meta: dict[str, Any] = {"rollout_id": f"r{i}"}
        if version is not None:
            meta["policy_version"] = version
        items.append(
            SAWItem(
                input_ids=ids,
                action_mask=[0] * prompt + [1] * completion,
                weight=rng.uniform(-1, 1),
                meta=meta,
                actor_logps=[rng.uniform(-4, -1) for _ in range(completion)] if logps else None,
            )
        )
    return items


class ListSource:
    """Serves the given batches in order (then raises)."""

    def __init__(self, batches: list[list[SAWItem]]) -> None:
        self.batches = list(batches)
        self.served = 0

    async def next_batch(self) -> SAWBatch:
        if self.served >= len(self.batches):
            raise DataError("ListSource is exhausted")
        self.served += 1
        return SAWBatch(items=self.batches[self.served - 1], meta={"avg_total_reward": 0.5})


class RecordingPublisher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, torch.Tensor]]] = []

    async def publish(self, named_tensors: Mapping[str, torch.Tensor], *, version: int) -> None:
        self.calls.append((version, dict(named_tensors)))

    async def aclose(self) -> None:
        return None


def _delta_after_one_sgd_step(
    items: list[SAWItem], budget: int, algorithm: Any, **cfg: Any
) -> dict[str, torch.Tensor]:
    model = tiny_causal_lm(bpe_tokenizer(), seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=ListSource([items]),
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            optimizer="sgd",
            lr=1.0,
            weight_decay=0.0,
            max_grad_norm=0,
            max_seq_len=64,
            micro_token_budget=budget,
            publish_every_steps=0,
            **cfg,
        ),
    )
    trainer.train_sync(1)
    return {n: before[n] - p.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize("algorithm", [sft(), grpo(group_size=1)], ids=["sft", "grpo"])
def test_micro_batched_gradient_equals_single_batch_gradient(algorithm: Any) -> None:
    items = make_items(12, seed=7, logps=True)
    whole = _delta_after_one_sgd_step(items, budget=64 * 12, algorithm=algorithm)
    split = _delta_after_one_sgd_step(items, budget=64, algorithm=algorithm)  # several micro-batches
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], rtol=1e-4, atol=1e-6, msg=name)
    assert any(v.abs().sum() > 0 for v in whole.values())


def test_gradient_checkpointing_gives_the_same_gradient() -> None:
    items = make_items(6, seed=3)
    plain = _delta_after_one_sgd_step(items, budget=256, algorithm=sft())
    ckpt = _delta_after_one_sgd_step(items, budget=256, algorithm=sft(), gradient_checkpointing=True)
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


def test_micro_batch_count_follows_the_budget() -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    items = make_items(10, seed=1)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([items]),
        config=TrainerConfig(
            pad_token_id=PAD, device="cpu", max_seq_len=32, micro_token_budget=64, publish_every_steps=0
        ),
    )
    result = trainer.train_sync(1)[0]
    assert result["train/num_micro_batches"] >= 4
    assert result["train/num_samples"] == 10
    assert result["train/num_tokens"] == sum(len(i) for i in items)
    assert result["perf/tokens_per_s"] > 0 and result["perf/step_s"] > 0
    assert result["train/avg_total_reward"] == 0.5


async def test_max_lag_drops_stale_items_and_refills() -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    stale = make_items(4, seed=1, version=0)
    fresh = make_items(4, seed=2, version=3)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([stale, stale[:2] + fresh]),
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            max_lag=1,
            max_seq_len=64,
            micro_token_budget=256,
            publish_every_steps=0,
        ),
    )
    trainer.step = 3  # pretend three steps happened: version-0 items lag by 3
    result = await trainer.train_step()
    assert result["train/num_samples"] == 4
    assert result["train/stale_items_dropped"] == 6  # a whole batch, then two items of the next
    assert result["train/policy_lag_max"] == 0.0


async def test_everything_stale_is_an_error_not_a_hang() -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    stale = make_items(2, seed=1, version=0)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([stale] * 3),
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            max_lag=0,
            max_refills=3,
            max_seq_len=64,
            micro_token_budget=256,
            publish_every_steps=0,
        ),
    )
    trainer.step = 5
    with pytest.raises(DataError, match="consecutive batches were empty"):
        await trainer.train_step()


async def test_items_from_future_policy_versions_are_an_error() -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([make_items(2, seed=1, version=7)]),
        config=TrainerConfig(
            pad_token_id=PAD, device="cpu", max_seq_len=64, micro_token_budget=256, publish_every_steps=0
        ),
    )
    trainer.step = 2
    with pytest.raises(DataError, match="policy_version up to 7 but the trainer is at step 2"):
        await trainer.train_step()


async def test_truncation_rate_counts_items_cut_by_the_micro_batcher() -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    items = make_items(4, seed=3)
    longest = max(len(i) for i in items)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([items]),
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            max_seq_len=longest - 1,
            micro_token_budget=256,
            publish_every_steps=0,
        ),
    )
    result = await trainer.train_step()
    expected = sum(1 for i in items if len(i) > longest - 1) / len(items)
    assert expected > 0
    assert result["train/seq_len_truncated_rate"] == expected


async def test_publisher_gets_merged_hf_named_weights_with_version_equal_to_step() -> None:
    from peft import LoraConfig, get_peft_model

    base = tiny_causal_lm(bpe_tokenizer(), seed=0)
    reference_names = set(base.state_dict())
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    publisher = RecordingPublisher()
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([make_items(4, seed=i) for i in range(4)]),
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            lr=1e-2,
            publish_every_steps=2,
            max_seq_len=64,
            micro_token_budget=256,
        ),
        publisher=publisher,
    )
    await trainer.train(4)
    assert [v for v, _ in publisher.calls] == [2, 4]
    tensors = publisher.calls[-1][1]
    assert set(tensors) == reference_names  # no lora_ keys, no base_model.model. prefixes
    # Merged: equals base weight + scale * B @ A, and the adapters stay unmerged for training.
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    expected = (
        layer.base_layer.weight
        + layer.scaling["default"] * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    )
    torch.testing.assert_close(tensors["model.layers.0.self_attn.q_proj.weight"], expected.detach())
    assert not layer.merged


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="micro_token_budget"):
        TrainerConfig(pad_token_id=0, micro_token_budget=0)
    with pytest.raises(ConfigError, match="lr"):
        TrainerConfig(pad_token_id=0, lr=-1.0)
    assert TrainerConfig(pad_token_id=bpe_tokenizer()).pad_token_id == bpe_tokenizer().pad_token_id
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    with pytest.raises(ConfigError, match="publisher"):
        Trainer(
            model=model,
            algorithm=sft(),
            batch_source=ListSource([]),
            config=TrainerConfig(pad_token_id=0),
        )
    with pytest.raises(ConfigError, match="evaluator"):
        Trainer(
            model=model,
            algorithm=sft(),
            batch_source=ListSource([]),
            config=TrainerConfig(pad_token_id=0, publish_every_steps=0, eval_every_steps=2),
        )


async def test_evaluator_runs_on_schedule_and_logs_under_eval(tmp_path: Path) -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    calls: list[int] = []

    async def evaluator(step: int) -> dict[str, float]:
        calls.append(step)
        assert not model.training
        return {"win_rate": step / 10}

    logger = JsonlLogger(tmp_path / "m.jsonl")
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=ListSource([make_items(2, seed=i) for i in range(4)]),
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            publish_every_steps=0,
            eval_at_start=True,
            eval_every_steps=2,
            max_seq_len=64,
            micro_token_budget=256,
        ),
        evaluator=evaluator,
        logger=logger,
    )
    await trainer.train(4)
    logger.close()
    assert calls == [0, 2, 4]
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["eval/win_rate"] for r in records if "eval/win_rate" in r] == [0.0, 0.2, 0.4]
    assert sum("train/loss" in r for r in records) == 4


async def test_sft_from_saw_jsonl_lowers_the_loss(tmp_path: Path) -> None:
    items = [attrs.evolve(i, weight=1.0, sampling_temperature=0.7) for i in make_items(8, seed=5)]
    path = tmp_path / "sft.jsonl"
    write_saw_jsonl(path, items)
    loaded = load_sft_items(path)
    assert len(loaded) == 8
    # SFT fits the untempered distribution whatever temperature the data was sampled at.
    assert {i.sampling_temperature for i in loaded} == {None}
    source = sft_batch_source(path, batch_size=8, seed=0)
    assert isinstance(source, OfflineBatchSource)
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=PAD,
            device="cpu",
            lr=3e-3,
            publish_every_steps=0,
            max_seq_len=64,
            micro_token_budget=512,
        ),
    )
    losses = [r["train/loss"] for r in await trainer.train(15)]
    assert losses[-1] < 0.8 * losses[0], losses
