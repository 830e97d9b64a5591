"""The FSDP test's training setup, shared by the 2-rank worker and the single-process reference."""

from __future__ import annotations

import random
from typing import Any

from ludic_core.algorithms import sft
from ludic_core.batch_sources import OfflineBatchSource
from ludic_core.saw import SAWItem
from ludic_train.config import TrainerConfig
from ludic_train.trainer import Trainer

STEPS = 2
ITEMS_PER_RANK = 4


def _items(n: int, seed: int) -> list[SAWItem]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt, completion = rng.randint(3, 10), rng.randint(2, 8)
        ids = [rng.randrange(5, 600) for _ in range(prompt + completion)]
        out.append(
            SAWItem(
                input_ids=ids,
                action_mask=[0] * prompt + [1] * completion,
                weight=1.0,
            )
        )
    return out


def batches(*, rank: int, world_size: int) -> OfflineBatchSource:
    # Rank r takes positions r, r + world_size, ... of the (unshuffled) item list; the single-process
    # reference (world_size=1) takes them all, in batches twice as large.
    items = _items(ITEMS_PER_RANK * 2 * STEPS, seed=11)
    return OfflineBatchSource(
        items, batch_size=ITEMS_PER_RANK * 2 // world_size, shuffle=False, rank=rank, world_size=world_size
    )


def make_trainer(model: Any, source: OfflineBatchSource, **kwargs: Any) -> Trainer:
    config = TrainerConfig(
        pad_token_id=0,
        device="cpu",
        optimizer="sgd",
        lr=0.5,
        weight_decay=0.0,
        # Low enough to clip: the sharded run must clip by the whole model's norm, as the reference does.
        max_grad_norm=0.5,
        max_seq_len=32,
        micro_token_budget=32,
        publish_every_steps=0,
    )
    return Trainer(model=model, algorithm=sft(), batch_source=source, config=config, **kwargs)
