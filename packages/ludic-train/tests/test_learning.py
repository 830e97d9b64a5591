"""CPU learning tests: GRPO on the toy digits env raises the mean reward of a tiny random model."""

from __future__ import annotations

import statistics

import pytest
import torch
from toy_rl import make_online_source

from ludic_train.config import TrainerConfig
from ludic_train.local_client import LocalPolicyClient
from ludic_train.presets import make_grpo
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

STEPS = 30
WINDOW = 5
MARGIN = 0.15  # mean reward of the last 5 steps minus the first 5 (random policy starts near 0.4)


async def _run(model: torch.nn.Module, lr: float) -> list[float]:
    tok = bpe_tokenizer()
    client = LocalPolicyClient(model, tok, batch_window_s=0.02, max_batch_size=256)
    algorithm = make_grpo(group_size=8)
    source = make_online_source(tok, client, algorithm, group_size=8, groups_per_step=4, max_tokens=4, seed=0)
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(pad_token_id=tok, device="cpu", lr=lr, max_seq_len=128, micro_token_budget=2048),
        publisher=client.as_publisher(),
    )
    results = await trainer.train(STEPS)
    assert client.policy_version == STEPS  # the sampler saw every step's weights
    return [r["train/avg_total_reward"] for r in results]


def _assert_learned(rewards: list[float]) -> None:
    before, after = statistics.mean(rewards[:WINDOW]), statistics.mean(rewards[-WINDOW:])
    assert after - before >= MARGIN, f"mean reward {before:.3f} -> {after:.3f} (need +{MARGIN}): {rewards}"


@pytest.mark.slow
async def test_grpo_full_finetune_raises_reward() -> None:
    _assert_learned(await _run(tiny_causal_lm(bpe_tokenizer(), seed=0), lr=3e-3))


@pytest.mark.slow
async def test_grpo_lora_raises_reward() -> None:
    from peft import LoraConfig, get_peft_model

    base = tiny_causal_lm(bpe_tokenizer(), seed=0)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    _assert_learned(await _run(model, lr=3e-3))
    for name, p in model.named_parameters():
        if name in frozen_before:
            assert torch.equal(p, frozen_before[name]), f"frozen base weight {name} changed"
