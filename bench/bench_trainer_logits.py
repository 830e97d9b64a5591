"""Trainer step time with logits at the action positions only against full logits, on the same batch.

The shape of a Tic-Tac-Toe step on SmolLM2-135M: a Llama with SmolLM2's width and 49,152-token vocabulary
(tied embeddings; ``--layers`` of its 30, random weights), items with ~100-token prompts and 8 action
tokens each. Both sides are ``ludic_train.Trainer.train_step`` with ``grpo()`` on identical models and
batches; they differ only in the forward pass:

* ``full_logits`` — the model behind a wrapper whose forward takes no ``logits_to_keep``, so the lm-head
  runs at every position and the loss gets ``[B, T, V]`` logits (what the trainer did before);
* ``action_logits`` — the model itself: the trainer passes the micro-batch's ``logit_positions`` as
  ``logits_to_keep`` and the lm-head runs at those ``K`` positions only.

Prints one JSON object: median seconds per step for each side, the speed-up (full / action), the size of
the logits tensor each side materialises and, on CUDA, each side's peak allocated memory. Ratios are
measured in one run with the sides interleaved: the machines are shared and absolute times drift.
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
from ludic_train.collate import logit_positions
from ludic_train.config import TrainerConfig
from ludic_train.trainer import Trainer

VOCAB = 49_152  # SmolLM2's


def make_items(n: int, *, seed: int, prompt_len: tuple[int, int], actions: int) -> list[SAWItem]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        prompt = rng.randint(*prompt_len)
        ids = [rng.randrange(5, VOCAB) for _ in range(prompt + actions)]
        items.append(
            SAWItem(
                input_ids=ids,
                action_mask=[0] * prompt + [1] * actions,
                weight=rng.uniform(-1, 1),
                meta={"rollout_id": f"r{i}"},
                actor_logps=[rng.uniform(-4.0, -0.5) for _ in range(actions)],
                sampling_temperature=0.7,
            )
        )
    return items


def make_model(layers: int, dtype: torch.dtype) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(  # SmolLM2-135M's width, fewer layers
        vocab_size=VOCAB,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).to(dtype)


class FullLogits(torch.nn.Module):
    """The same model behind a forward without ``logits_to_keep``: the trainer falls back to full logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


class RepeatSource:
    def __init__(self, items: list[SAWItem]) -> None:
        self.items = items

    async def next_batch(self) -> SAWBatch:
        return SAWBatch(items=list(self.items))


def make_trainer(model: torch.nn.Module, items: list[SAWItem], device: str) -> Trainer:
    longest = max(len(i) for i in items)
    return Trainer(
        model=model,
        algorithm=grpo(group_size=1),
        batch_source=RepeatSource(items),
        config=TrainerConfig(
            pad_token_id=0,
            device=device,
            lr=1e-5,
            max_seq_len=longest,
            micro_token_budget=longest * len(items),  # one micro-batch, as the Trainer would pack it
            publish_every_steps=0,
        ),
    )


def timed_step(trainer: Trainer, device: str) -> tuple[float, float | None]:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    asyncio.run(trainer.train_step())
    if device == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter() - start, torch.cuda.max_memory_allocated() / 2**20
    return time.perf_counter() - start, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--prompt-min", type=int, default=90)
    parser.add_argument("--prompt-max", type=int, default=110)
    parser.add_argument("--actions", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2, help="of SmolLM2-135M's 30")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    facts = machine_facts()
    dtype = getattr(torch, args.dtype)

    items = make_items(
        args.items, seed=0, prompt_len=(args.prompt_min, args.prompt_max), actions=args.actions
    )
    full = make_trainer(FullLogits(make_model(args.layers, dtype)), items, args.device)
    action = make_trainer(make_model(args.layers, dtype), items, args.device)

    timed_step(full, args.device)  # warm-up both sides
    timed_step(action, args.device)
    times: dict[str, list[float]] = {"full_logits": [], "action_logits": []}
    peaks: dict[str, list[float]] = {"full_logits": [], "action_logits": []}
    for _ in range(args.repeats):  # interleaved so that machine noise hits both sides alike
        for name, trainer in (("full_logits", full), ("action_logits", action)):
            seconds, peak = timed_step(trainer, args.device)
            times[name].append(seconds)
            if peak is not None:
                peaks[name].append(peak)

    seconds_per_step = {name: statistics.median(values) for name, values in times.items()}
    longest = max(len(i) for i in items)
    kept = len(logit_positions(items))
    # What each side's lm-head output holds (its gradient is as large again).
    size = torch.tensor([], dtype=dtype).element_size()
    logits_mb = {
        "full_logits": args.items * longest * VOCAB * size / 2**20,
        "action_logits": args.items * kept * VOCAB * size / 2**20,
    }
    result: dict[str, Any] = {
        "benchmark": "trainer_step_full_vs_action_logits",
        "device": args.device,
        "dtype": args.dtype,
        "items": args.items,
        "layers": args.layers,
        "vocab": VOCAB,
        "padded_length": longest,
        "logit_positions": kept,
        "repeats": args.repeats,
        "seconds_per_step": seconds_per_step,
        "speedup_action_vs_full": seconds_per_step["full_logits"] / seconds_per_step["action_logits"],
        "logits_mb": logits_mb,
    }
    if args.device == "cuda":
        result["peak_memory_mb"] = {name: max(values) for name, values in peaks.items()}
    headline = {
        f"step, full logits ({args.device}, s)": round(seconds_per_step["full_logits"], 4),
        f"step, action logits ({args.device}, s)": round(seconds_per_step["action_logits"], 4),
        "speedup, action / full logits": round(result["speedup_action_vs_full"], 2),
    }
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
