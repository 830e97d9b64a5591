"""The derived micro-batch budget: the formula, the CPU cap, and what the Trainer does with it."""

from __future__ import annotations

import torch

from ludic_core.algorithms import sft
from ludic_train.config import TrainerConfig
from ludic_train.memory_budget import (
    CPU_ACTIVATION_CAP_BYTES,
    FALLBACK_BUDGET,
    activation_bytes_per_token,
    derive_micro_token_budget,
)
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

# SmolLM2-135M's shape: its measured cost per token is 3.25–3.45 MB (memory_budget's docstring).
SMOLLM2 = {"layers": 30, "hidden": 576, "intermediate": 1536, "vocab": 49152}


class _NoBatches:
    async def next_batch(self) -> None:  # never called: these tests only build Trainers
        raise AssertionError("not used")


def test_formula_matches_the_measured_smollm2_cost() -> None:
    per_token = activation_bytes_per_token(**SMOLLM2, dtype_bytes=4, gradient_checkpointing=False)
    assert 3.2e6 < per_token < 3.7e6
    checkpointed = activation_bytes_per_token(**SMOLLM2, dtype_bytes=4, gradient_checkpointing=True)
    assert checkpointed < per_token / 3  # only each layer's input, and one layer recomputed
    half = activation_bytes_per_token(**SMOLLM2, dtype_bytes=2, gradient_checkpointing=False)
    assert half < per_token  # bf16 layers; the logits stay fp32


def test_cpu_budget_is_the_cap_over_the_cost_as_a_power_of_two() -> None:
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    budget = derive_micro_token_budget(model, torch.device("cpu"), gradient_checkpointing=False)
    assert budget.bytes_per_token is not None and budget.activation_bytes is not None
    assert budget.activation_bytes <= CPU_ACTIVATION_CAP_BYTES
    assert budget.tokens & (budget.tokens - 1) == 0  # a power of two
    assert budget.tokens * budget.bytes_per_token <= budget.activation_bytes
    assert 2 * budget.tokens * budget.bytes_per_token > budget.activation_bytes


def test_a_model_without_a_shape_gets_the_fallback_and_says_why() -> None:
    budget = derive_micro_token_budget(
        torch.nn.Linear(4, 4), torch.device("cpu"), gradient_checkpointing=False
    )
    assert budget.tokens == FALLBACK_BUDGET
    assert "Linear has no config" in budget.reason


def test_trainer_derives_the_budget_only_when_none_is_set() -> None:
    tokenizer = bpe_tokenizer()
    model = tiny_causal_lm(tokenizer, seed=0)
    derived = derive_micro_token_budget(model, torch.device("cpu"), gradient_checkpointing=False).tokens

    def trainer(**settings: object) -> Trainer:
        config = TrainerConfig(pad_token_id=tokenizer, device="cpu", publish_every_steps=0, **settings)  # type: ignore[arg-type]
        return Trainer(model=model, algorithm=sft(), batch_source=_NoBatches(), config=config)

    assert trainer().micro_token_budget == derived
    assert trainer(micro_token_budget=96).micro_token_budget == 96
