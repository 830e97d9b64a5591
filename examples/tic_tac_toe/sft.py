"""Supervised fine-tuning on rejection-sampled games (``examples/rejection_sampling.py``) or SAW JSONL.

SFT is the same Trainer with ``make_sft()`` (masked cross-entropy on the model's own moves) over an
offline, resumable batch source; nothing is published (``publish_every_steps=0``).

    python examples/tic_tac_toe/sft.py --model smollm2 --data runs/tictactoe/winners.jsonl --epochs 2
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="SFT on rejection-sampled Tic-Tac-Toe games",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="smollm2", help="HF directory, 'smollm2' or 'tiny'")
    p.add_argument("--data", type=Path, nargs="+", default=[Path("runs/tictactoe/winners.jsonl")])
    p.add_argument("--min-reward", type=float, default=None, help="filter rollout logs again at load time")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tuning")
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--micro-token-budget", type=int, default=8192)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", type=Path, default=Path("runs/tictactoe/sft_checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--max-to-keep", type=int, default=2)
    p.add_argument("--logger", default="print", help="comma list of rich, print, jsonl, wandb, none")
    p.add_argument("--metrics", type=Path, default=Path("runs/tictactoe/sft_metrics.jsonl"))
    p.add_argument("--final-save", type=Path, default=None)
    return p.parse_args(argv)


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    from train import load_model, make_logger

    from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
    from ludic_train.config import TrainerConfig
    from ludic_train.lora import apply_lora
    from ludic_train.presets import make_sft
    from ludic_train.sft import sft_batch_source
    from ludic_train.trainer import Trainer
    from ludic_train.weights import export_pretrained

    model, tokenizer = load_model(args.model, args.seed)
    if args.lora_rank:
        model = apply_lora(model, rank=args.lora_rank)
    source = sft_batch_source(
        args.data, batch_size=args.batch_size, min_reward=args.min_reward, seed=args.seed
    )
    steps = args.epochs * math.ceil(source.items_per_epoch / args.batch_size)
    trainer = Trainer(
        model=model,
        algorithm=make_sft(length_normalize=True),
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tokenizer,
            lr=args.lr,
            max_grad_norm=args.max_grad_norm,
            max_seq_len=args.max_seq_len,
            micro_token_budget=args.micro_token_budget,
            publish_every_steps=0,
        ),
        checkpointer=CheckpointManager(
            CheckpointConfig(
                args.checkpoint_dir, every_n_steps=args.checkpoint_every, max_to_keep=args.max_to_keep
            )
        ),
        logger=make_logger(args.logger, steps, args.metrics),
    )
    results = await trainer.train(steps)
    await trainer.aclose()
    if args.final_save is not None:
        export_pretrained(model, args.final_save, tokenizer=tokenizer)
    return [dict(r) for r in results]


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
