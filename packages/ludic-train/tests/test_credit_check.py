"""The trainer refuses items weighted by another credit assigner than its algorithm's: without the
check a preset's credit assigner is silently unused whenever the batch source was built with another
one (GRPO and Dr. GRPO would train step for step alike)."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from test_trainer import PAD, ListSource, make_items

from ludic_core.algorithms import dr_grpo, grpo
from ludic_core.credit import GroupNormalizedReturn, credit_signature
from ludic_core.errors import ConfigError
from ludic_core.saw import SAWItem
from ludic_train.config import TrainerConfig
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer


def _stamped(credit: str | None) -> list[SAWItem]:
    items = make_items(4, seed=0, logps=True)
    if credit is not None:
        items = [attrs.evolve(item, meta={**item.meta, "credit": credit}) for item in items]
    return items


def _trainer(algorithm: Any, items: list[SAWItem]) -> Trainer:
    config = TrainerConfig(
        pad_token_id=PAD, device="cpu", max_seq_len=64, micro_token_budget=256, publish_every_steps=0
    )
    return Trainer(
        model=tiny_causal_lm(bpe_tokenizer(), seed=0),
        algorithm=algorithm,
        batch_source=ListSource([items, items]),
        config=config,
    )


def test_the_presets_differ_in_their_credit_signature() -> None:
    assert credit_signature(grpo().credit_assigner) != credit_signature(dr_grpo().credit_assigner)
    signature = credit_signature(GroupNormalizedReturn(normalize_adv=False))
    assert signature.startswith("GroupNormalizedReturn(") and "normalize_adv=False" in signature


async def test_items_credited_by_another_assigner_are_refused_naming_both() -> None:
    grpo_credit = credit_signature(grpo().credit_assigner)
    dr_grpo_spec = dr_grpo()
    trainer = _trainer(dr_grpo_spec, _stamped(grpo_credit))
    with pytest.raises(ConfigError) as caught:
        await trainer.train_step()
    message = str(caught.value)
    assert grpo_credit in message and credit_signature(dr_grpo_spec.credit_assigner) in message
    assert "credit_assigner=algorithm.credit_assigner" in message


async def test_items_credited_by_the_algorithms_assigner_train() -> None:
    grpo_spec = grpo()
    result = await _trainer(grpo_spec, _stamped(credit_signature(grpo_spec.credit_assigner))).train_step()
    assert result["train/step"] == 1


async def test_unstamped_items_train_as_given_and_say_so_once(caplog: pytest.LogCaptureFixture) -> None:
    trainer = _trainer(grpo(), _stamped(None))
    with caplog.at_level(logging.INFO):
        await trainer.train_step()
        await trainer.train_step()
    assert sum("trainer.credit_not_applied" in r.getMessage() for r in caplog.records) == 1
