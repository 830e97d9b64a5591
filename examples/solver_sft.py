"""How fast SmolLM2-135M + LoRA learns Tic-Tac-Toe when shown the best moves: the ceiling for RL.

RL on single decisions (``examples/demo.py --preset strong``) pays each move the outcome perfect play
reaches after it. This script gives the same model the answers instead: supervised fine-tuning on
the perfect player's moves in random positions (drawn as the strong preset draws its training
positions), scored on the demo's fixed positions and games after every ``--eval-every`` steps. If
the model learns the game slowly even when told every best move, RL on the same number of positions
cannot be expected to learn it faster; docs/training-results.md compares the two.

    python examples/solver_sft.py                       # 120 steps of 32 positions (~30 min on 2 cores)
    python examples/solver_sft.py --model tiny --steps 2 --positions-per-step 4 --eval-positions 4 \\
        --eval-games 2                                  # every stage in seconds, nothing learned

No warm start: the first evaluation is the base model, which never answers in the move format; the
perfect player's replies teach the format and the moves together. Peak resident memory under 2.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent / "tic_tac_toe"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lora_run import StagePeaks, add_run_arguments, apply_preset, run_script, start_run

RUN_NAME = "solver-sft"
DEFAULTS: dict[str, Any] = {"model": "smollm2"}
MIN_LEGAL = 0.9  # --check: SmolLM2 must at least learn the move format from the solver's replies


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_run_arguments(
        p,
        run_name=RUN_NAME,
        check_help=f"exit 1 unless the final legal-move rate is >= {MIN_LEGAL} (SmolLM2 only)",
    )
    p.add_argument("--steps", type=int, default=120, help="optimiser steps")
    p.add_argument("--positions-per-step", type=int, default=32, help="solver moves per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=30, help="evaluate every N steps (and at the end)")
    p.add_argument("--eval-positions", type=int, default=200, help="fixed positions scored per evaluation")
    p.add_argument("--eval-games", type=int, default=100, help="games at T = 1 against the random opponent")
    return apply_preset(p.parse_args(argv), DEFAULTS, run_name=RUN_NAME)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from common import TrainingPositions, grpo_requests, make_engine, rollout_settings
    from evaluation import Evaluation
    from players import perfect_player

    from ludic_agents.chat_template import HFChatTemplate
    from ludic_core.algorithms import sft
    from ludic_core.batch_sources import OfflineBatchSource
    from ludic_core.credit import ConstantCredit
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.saw_builder import build_saw_items
    from ludic_train.config import TrainerConfig
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.trainer import Trainer

    started = time.perf_counter()
    peaks = StagePeaks()
    model, tokenizer = start_run(args)
    peaks.done("loading")
    # The solver's moves, one per position, through the agent's own engine, prompt and parser.
    teacher = make_engine(perfect_player(tokenizer), chat_template=HFChatTemplate(tokenizer), seed=args.seed)
    requests = grpo_requests(
        group_size=1,
        groups_per_step=args.steps * args.positions_per_step,
        temperature=1.0,
        seed=args.seed + 1,
        games=TrainingPositions(),
    )(0)
    # One move per position: the episode ends after the agent's first move.
    played = list((await teacher.generate_rollouts(requests, rollout_settings(1))).rollouts)
    items = build_saw_items(played, ConstantCredit().compute(played))
    print(f"{len(items)} solver moves, {args.positions_per_step} a step", flush=True)

    client = LocalPolicyClient(model, tokenizer, max_batch_size=64, seed=args.seed)
    engine = make_engine(client, seed=args.seed)
    evaluation = Evaluation(
        positions=args.eval_positions,
        games=args.eval_games,
        greedy_games=0,
        seed=args.seed,
        sampled_temperature=1.0,
    )
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=OfflineBatchSource(items, batch_size=args.positions_per_step, seed=args.seed),
        config=TrainerConfig(
            pad_token_id=tokenizer,
            lr=args.lr,
            max_grad_norm=1.0,
            max_seq_len=256,
            micro_token_budget=2048,  # the demo's
        ),
        publisher=client.as_publisher(),
        logger=JsonlLogger(args.out / "metrics.jsonl"),
    )
    curve: list[dict[str, Any]] = []

    async def evaluate(step: int) -> None:
        result = await evaluation.run(engine)
        row = {
            "step": step,
            "solver_moves_seen": step * args.positions_per_step,
            **{k: result["positions"][k] for k in ("legal_move_rate", "optimal_move_rate")},
            "points_mean": result["sampled_games"]["points_mean"],
        }
        curve.append(row)
        peaks.done("evaluation")
        print(
            f"step {step} ({row['solver_moves_seen']} moves seen, {time.perf_counter() - started:.0f} s): "
            f"legal {row['legal_move_rate']:.3f}, optimal {row['optimal_move_rate']:.3f}, "
            f"points per game {row['points_mean']:.3f}",
            flush=True,
        )

    await evaluate(0)
    done = 0
    while done < args.steps:
        chunk = min(args.eval_every or args.steps, args.steps - done)
        await trainer.train(chunk)
        peaks.done("training")
        done += chunk
        await evaluate(done)
    summary = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "curve": curve,
        "wall_s": time.perf_counter() - started,
        "peak_rss_mb": max(peaks.by_stage.values()),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"Wall time {summary['wall_s']:.0f} s; files in {args.out}/: summary.json, metrics.jsonl")
    return summary


def check(summary: dict[str, Any]) -> list[str]:
    if summary["args"]["model"] != "smollm2":
        return []
    legal = summary["curve"][-1]["legal_move_rate"]
    return [f"final legal-move rate {legal:.3f} < {MIN_LEGAL}"] if legal < MIN_LEGAL else []


if __name__ == "__main__":
    run_script("solver_sft.py", parse_args, main, check)
