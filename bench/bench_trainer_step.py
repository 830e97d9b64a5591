"""Trainer step time against a bare torch loop on the same batch, at one and at two threads.

Both sides take the same macro-batch of SAW items (GRPO-style: ragged prompt and completion lengths,
prompt tokens masked, completion tokens trained, sampler logprobs attached), start from the same tiny
model initialisation with the same AdamW settings and gradient clipping, and run one optimisation step per
repetition:

* ``bare_torch`` — the same loss math written plainly: pad the items into one tensor batch, one forward
  pass with full logits, ``log_softmax`` + ``gather`` of the next tokens, GRPO's token-level clipped
  surrogate (band ``[0.8, 1.27]``, summed per sequence, mean over sequences), backward, clip to norm 1,
  AdamW step, the loss read on the host. The least a researcher would write by hand.
* ``ludic_trainer`` — ``ludic_train.Trainer.train_step`` with ``grpo()``: token-budget micro-batching
  (one micro-batch here, the same shape of work), logits at the action positions only, the preset's loss
  and its stats, the step's metrics in one host transfer; no publishing, no checkpoints. Awaited in one
  event loop, as a training run does.

Both sides' first-step losses are reported: they must agree (the same objective on the same weights).
For each thread count (``torch.set_num_threads``) the sides alternate within each repetition (which
goes first alternates too), so machine noise hits both alike; the medians and their ratio (trainer / bare)
are printed as one JSON object, with the median of the per-repetition ratios beside them. The ratio is what matters: the machines are shared and absolute times
drift.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import torch
from _machine import emit, machine_facts

from ludic_core.algorithms import grpo
from ludic_core.saw import SAWBatch, SAWItem
from ludic_train.config import TrainerConfig
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

CLIP_LOW, CLIP_HIGH = 0.2, 0.27  # grpo()'s band
LR, WEIGHT_DECAY, MAX_GRAD_NORM = 1e-5, 0.01, 1.0  # TrainerConfig's defaults, stated for the bare loop


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


def bare_step(model: Any, optimizer: torch.optim.Optimizer, items: list[SAWItem], pad: int) -> float:
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
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - CLIP_LOW, 1.0 + CLIP_HIGH) * adv)
    loss = -((surrogate * mask).sum(dim=1)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def make_trainer(model: Any, items: list[SAWItem], *, pad: int, max_len: int) -> Trainer:
    return Trainer(
        model=model,
        algorithm=grpo(group_size=1),
        batch_source=RepeatSource(items),
        config=TrainerConfig(
            pad_token_id=pad,
            device="cpu",
            lr=LR,
            weight_decay=WEIGHT_DECAY,
            max_grad_norm=MAX_GRAD_NORM,
            max_seq_len=max_len,
            micro_token_budget=len(items) * max_len,  # one micro-batch: the same shape of work
            publish_every_steps=0,
        ),
    )


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    tokenizer = bpe_tokenizer()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    items = make_items(args.items, seed=0, vocab=len(tokenizer), max_len=args.max_len)
    bare_model = tiny_causal_lm(tokenizer, seed=0)
    bare_model.train()
    bare_optimizer = torch.optim.AdamW(bare_model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    trainer = make_trainer(tiny_causal_lm(tokenizer, seed=0), items, pad=pad, max_len=args.max_len)

    async def trainer_step() -> float:
        result = await trainer.train_step()
        return result["train/loss"]

    # The first step of each side is on identical weights: the two objectives must agree.
    first_loss = {"bare_torch": bare_step(bare_model, bare_optimizer, items, pad)}
    first_loss["ludic_trainer"] = await trainer_step()

    per_threads: dict[str, Any] = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        bare_step(bare_model, bare_optimizer, items, pad)  # warm-up at this thread count
        await trainer_step()
        times: dict[str, list[float]] = {"bare_torch": [], "ludic_trainer": []}
        for repeat in range(args.repeats):
            order = ["bare_torch", "ludic_trainer"]
            for side in order if repeat % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                if side == "bare_torch":
                    bare_step(bare_model, bare_optimizer, items, pad)
                else:
                    await trainer_step()
                times[side].append(time.perf_counter() - start)
        medians = {side: statistics.median(values) for side, values in times.items()}
        # Each repetition's two steps ran back to back: their ratio cancels slow drifts in machine load.
        paired = [t / b for t, b in zip(times["ludic_trainer"], times["bare_torch"], strict=True)]
        per_threads[str(threads)] = {
            "seconds_per_step": medians,
            "ratio_trainer_vs_bare": medians["ludic_trainer"] / medians["bare_torch"],
            "median_paired_ratio": statistics.median(paired),
        }
    return {
        "benchmark": "trainer_step_vs_bare_torch",
        "items": args.items,
        "max_len": args.max_len,
        "tokens": sum(len(i) for i in items),
        "action_tokens": sum(i.num_action_tokens for i in items),
        "repeats": args.repeats,
        "first_step_loss": first_loss,
        "threads": per_threads,
        "ratio_trainer_vs_bare": {t: v["ratio_trainer_vs_bare"] for t, v in per_threads.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=9, help="timed steps per side and thread count")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch.set_num_threads values")
    args = parser.parse_args()
    for name, value in (("--items", args.items), ("--max-len", args.max_len), ("--repeats", args.repeats)):
        if value < 1:
            parser.error(f"{name} must be >= 1, got {value}")
    if any(t < 1 for t in args.threads):
        parser.error(f"--threads must all be >= 1, got {args.threads}")
    facts = machine_facts()
    result = asyncio.run(measure(args))
    headline = {
        f"Trainer step / bare torch step, {threads} threads": round(ratio, 2)
        for threads, ratio in result["ratio_trainer_vs_bare"].items()
    }
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
