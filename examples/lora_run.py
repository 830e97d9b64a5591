"""What the SmolLM2 + LoRA example scripts (self-play, tool use) share: the run arguments, the model,
each stage's peak memory and the ``__main__`` block."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "StagePeaks",
    "add_run_arguments",
    "apply_preset",
    "load_lora_model",
    "reward_rise_problem",
    "run_script",
    "start_run",
    "warm_start",
]


def add_run_arguments(parser: argparse.ArgumentParser, *, run_name: str, check_help: str) -> None:
    """The arguments every script takes: model, adapter, seed, threads, run directory, ``--check``."""
    parser.add_argument(
        "--model", choices=("smollm2", "tiny"), help="SmolLM2-135M-Instruct, or a tiny random model"
    )
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--lora-layers", type=int, default=8, help="adapt the top N decoder layers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="torch CPU threads")
    parser.add_argument(
        "--out", type=Path, help=f"run directory (default: a new runs/{run_name}-<date>-<time>/)"
    )
    parser.add_argument("--check", action="store_true", help=check_help)


def apply_preset(args: argparse.Namespace, preset: Mapping[str, Any], *, run_name: str) -> argparse.Namespace:
    """Fill every argument left unset from ``preset``, and the run directory from the time."""
    if args.out is None:
        args.out = Path("runs") / time.strftime(f"{run_name}-%Y%m%d-%H%M%S")
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def load_lora_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct with LoRA (``args.lora_rank``) on its top ``args.lora_layers`` layers, or
    (``--model tiny``) a tiny random model on a ChatML tokenizer with LoRA on the head too; adapters
    are drawn from a seeded RNG, whatever ran before."""
    import torch

    from ludic_train.lora import apply_lora, top_layers
    from ludic_train.testing import bpe_tokenizer, load_smollm2, tiny_causal_lm

    if args.model == "tiny":
        tokenizer = bpe_tokenizer()
        # Its own output head: the adapter below covers the head, and an adapter on a head tied to the
        # input embeddings would move the embeddings too once merged for publishing.
        base = tiny_causal_lm(tokenizer, seed=args.seed, tie_word_embeddings=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            # The head too: adapters on two tiny blocks alone barely move the output distribution.
            return apply_lora(base, rank=8, include_lm_head=True), tokenizer
    base, tokenizer = load_smollm2()
    top = top_layers(base, args.lora_layers, field="--lora-layers")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(args.seed)
        return apply_lora(base, rank=args.lora_rank, layers=top), tokenizer


def start_run(args: argparse.Namespace) -> tuple[Any, Any]:
    """Set torch's threads and seed, make the run directory (a rerun into it starts a new
    ``metrics.jsonl``) and load the model: ``(model, tokenizer)``."""
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics.jsonl").unlink(missing_ok=True)
    return load_lora_model(args)


async def warm_start(
    model: Any,
    items: Sequence[Any],
    *,
    lr: float,
    steps: int,
    seed: int,
    config: Mapping[str, Any],
    logger: Any,
) -> None:
    """SFT on a teacher's SAW items, 16 per step, for ``steps`` steps (``config``: the trainer settings
    the run's GRPO stage uses too)."""
    from ludic_core.algorithms import sft
    from ludic_core.batch_sources import OfflineBatchSource
    from ludic_train.config import TrainerConfig
    from ludic_train.trainer import Trainer

    sft = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=OfflineBatchSource(list(items), batch_size=16, seed=seed),
        config=TrainerConfig(lr=lr, publish_every_steps=0, **config),
        logger=logger,
    )
    await sft.train(steps)


def reward_rise_problem(rewards: Sequence[float], *, margin: float, label: str) -> str | None:
    """``--check``'s learning test: the mean reward of the last two steps minus the first two must be at
    least ``margin``. Returns what is wrong (``label`` names the stage, e.g. ``"GRPO"``), else None."""
    if len(rewards) < 4:
        return f"--check needs at least 4 {label} steps, got {len(rewards)}"
    rise = statistics.fmean(rewards[-2:]) - statistics.fmean(rewards[:2])
    if rise < margin:
        return f"{label} reward rose by {rise:+.3f} (last two steps over the first two) < {margin}"
    return None


class StagePeaks:
    """Peak resident memory per stage of a run (a stage may run in several segments)."""

    def __init__(self) -> None:
        self.by_stage: dict[str, int] = {}

    def done(self, stage: str) -> None:
        """Close a segment of ``stage``: record its peak, start a new window."""
        from ludic_core.peak_memory import peak_rss_mb, reset_peak_rss

        self.by_stage[stage] = max(self.by_stage.get(stage, 0), round(peak_rss_mb()))
        reset_peak_rss()

    @property
    def peak(self) -> int:
        return max(self.by_stage.values(), default=0)


def run_script(
    name: str,
    parse_args: Callable[[], argparse.Namespace],
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]],
    check: Callable[[dict[str, Any]], list[str]],
) -> None:
    """The ``__main__`` block: one heap arena, the run, and with ``--check`` exit 1 naming each broken
    promise."""
    from ludic_core.peak_memory import limit_malloc_arenas

    limit_malloc_arenas()  # before any thread allocates: one heap arena keeps freed memory reusable
    arguments = parse_args()
    result = asyncio.run(main(arguments))
    if arguments.check and (failures := check(result)):
        sys.exit(f"{name} --check failed: " + "; ".join(failures))
