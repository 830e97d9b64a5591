"""Trainer step time against a minimal hand-written torch loop on the same batch.

Both sides take the same macro-batch of SAW items (GRPO-style: prompt tokens masked, completion tokens
trained, sampler logprobs attached), the same tiny model initialisation and the same AdamW settings,
and run one optimisation step per repetition:

* ``hand_written`` — pad everything into one tensor batch, one forward pass, the token-level clipped
  surrogate written inline, backward, clip, AdamW step. The least a researcher would write by hand.
* ``ludic_trainer`` — ``ludic_train.Trainer.train_step`` with ``make_grpo``: token-budget micro-batches,
  the preset's loss and stats, metrics with one host transfer, no publishing or checkpoints.

Prints one JSON object: median seconds per step for each side and their ratio (trainer / hand-written).
The ratio is what matters: the machines are shared and absolute times drift.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

import torch

from ludic_core.saw import SAWBatch, SAWItem
from ludic_train.config import TrainerConfig
from ludic_train.presets import make_grpo
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer


def make_items(n: int, *, seed: int, vocab: int, max_len: int) -> list[SAWItem]:
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        prompt, completion = rng.randint(16, max_len // 2), rng.randint(8, max_len // 2)
        ids = [rng.randrange(5, vocab) for _ in range(prompt + completion)]
        items.append(
            SAWItem(
                input_ids=ids,
                action_mask=[0] * prompt + [1] * completion,
                weight=rng.uniform(-1, 1),
                meta={"rollout_id": f"r{len(items)}"},
                actor_logps=[rng.uniform(-4.0, -0.5) for _ in range(completion)],
            )
        )
    return items


class RepeatSource:
    def __init__(self, items: list[SAWItem]) -> None:
        self.items = items

    async def next_batch(self) -> SAWBatch:
        return SAWBatch(items=list(self.items))


def hand_written_step(model: Any, optimizer: torch.optim.Optimizer, items: list[SAWItem], pad: int) -> None:
    longest = max(len(i) for i in items)
    n = len(items)
    input_ids = torch.full((n, longest), pad, dtype=torch.long)
    attention = torch.zeros((n, longest), dtype=torch.long)
    action = torch.zeros((n, longest))
    old_logp = torch.zeros((n, longest))
    for row, item in enumerate(items):
        length = len(item)
        input_ids[row, :length] = torch.tensor(item.input_ids)
        attention[row, :length] = 1
        mask = torch.tensor(item.action_mask, dtype=torch.float32)
        action[row, :length] = mask
        old_logp[row, :length][mask.bool()] = torch.tensor(item.actor_logps or ())
    weight = torch.tensor([i.weight for i in items])
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    mask = action[:, 1:]
    ratio = torch.exp(logp - old_logp[:, 1:])
    adv = weight[:, None]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.27) * adv)
    loss = -((surrogate * mask).sum(dim=1)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = bpe_tokenizer()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    items = make_items(args.items, seed=0, vocab=len(tokenizer), max_len=args.max_len)
    budget = args.items * args.max_len  # one micro-batch: the same shape of work as the hand loop

    hand_model = tiny_causal_lm(tokenizer, seed=0)
    hand_model.train()
    hand_optimizer = torch.optim.AdamW(hand_model.parameters(), lr=1e-5, weight_decay=0.01)
    trainer = Trainer(
        model=tiny_causal_lm(tokenizer, seed=0),
        algorithm=make_grpo(group_size=1),
        batch_source=RepeatSource(items),
        config=TrainerConfig(
            pad_token_id=pad,
            device="cpu",
            lr=1e-5,
            max_seq_len=args.max_len,
            micro_token_budget=budget,
            publish_every_steps=0,
        ),
    )

    hand_written_step(hand_model, hand_optimizer, items, pad)  # warm-up both sides
    asyncio.run(trainer.train_step())
    hand_times, trainer_times = [], []
    for _ in range(args.repeats):  # interleaved so that machine noise hits both sides alike
        start = time.perf_counter()
        hand_written_step(hand_model, hand_optimizer, items, pad)
        hand_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        asyncio.run(trainer.train_step())
        trainer_times.append(time.perf_counter() - start)

    hand, ludic = statistics.median(hand_times), statistics.median(trainer_times)
    print(
        json.dumps(
            {
                "benchmark": "trainer_step_vs_hand_written",
                "items": args.items,
                "max_len": args.max_len,
                "repeats": args.repeats,
                "seconds_per_step": {"hand_written": hand, "ludic_trainer": ludic},
                "ratio_trainer_vs_hand_written": ludic / hand,
            }
        )
    )


if __name__ == "__main__":
    main()
