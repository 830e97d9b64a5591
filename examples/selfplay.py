"""Self-play: one policy plays both seats of two-player Tic-Tac-Toe and learns from both.

The warm start is the demo's (SFT on a rules-only teacher's games). Then GRPO trains the policy against
itself: every game runs through ``MultiAgentProtocol`` with the same model behind X and O, yields one
rollout per seat, and the group-relative credit compares each seat's rollouts only with that seat's
rollouts of the same group (``(group_id, agent_id)`` groups). Outcome rewards only: win 1, draw 0.5,
loss 0; an illegal or malformed move -1 for the mover and a win for the other seat. The recipe
``ludic train tictactoe-selfplay examples/tic_tac_toe/selfplay.toml`` trains the same way at the same
sizes (full-dialog prompts, and a greedy self-play evaluation in place of this script's report).

What the run reports, against the warm start it started from:

* **head-to-head**: pairs of games between the trained policy and a frozen copy of its warm start,
  one game with the trained policy as X and one as O on the same sampling seeds, at T = 1; the trained
  policy's points per game (win 1, draw ½; a forfeit by either side counts as a win for the other)
  with a 95% interval over the pairs;
* **optimal-move rate** on the demo's fixed positions (scored by the solver) with a paired interval;
* points per game against the random opponent (the demo's games), with a paired interval.

    python examples/selfplay.py                 # SmolLM2-135M: ~21 min on 2 CPU cores, < 3.7 GB resident
    python examples/selfplay.py --smoke         # CI's learning check (with --check): ~6 min, 2.3 GB
    python examples/selfplay.py --model tiny --smoke   # a tiny random model: the plumbing in seconds
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent / "tic_tac_toe"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lora_run import (
    StagePeaks,
    add_run_arguments,
    apply_preset,
    reward_rise_problem,
    run_script,
    start_run,
    warm_start,
)

GAME_MOVES = 9  # both seats together never move more than nine times
TRAIN_TEMPERATURE = 1.0
# --check: the mean self-play reward of the last two steps minus the first two. Measured with --smoke
# (seed 0, 2 CPU cores): 0.094 -> 0.398 (+0.30); the margin is a third of that.
MIN_REWARD_RISE = 0.1
MATCH_CONCURRENCY = 64


PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "model": "smollm2",
        "teacher_games": 64,
        "sft_steps": 20,
        "sft_lr": 2e-3,
        "steps": 30,
        "groups_per_step": 4,
        "lr": 1e-3,
        "start_share": 0.5,
        "eval_positions": 200,
        "eval_games": 150,
        "match_pairs": 100,
    },
    # CI's learning check (`nox -s selfplay`): the same warm start and a few self-play steps.
    "smoke": {
        "model": "smollm2",
        "teacher_games": 64,
        "sft_steps": 20,
        "sft_lr": 2e-3,
        "steps": 6,
        "groups_per_step": 4,
        "lr": 1e-3,
        "start_share": 0.5,
        "eval_positions": 100,
        "eval_games": 0,
        "match_pairs": 50,
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--smoke", action="store_true", help="CI's size (PRESETS['smoke']): a few self-play steps")
    p.add_argument("--teacher-games", type=int, help="rules-only teacher games for the warm start")
    p.add_argument("--sft-steps", type=int, help="warm-start optimiser steps")
    p.add_argument("--sft-lr", type=float)
    p.add_argument("--steps", type=int, help="self-play GRPO optimiser steps")
    p.add_argument(
        "--group-size", type=int, default=8, help="games per GRPO group (same start, other samples)"
    )
    p.add_argument("--groups-per-step", type=int)
    p.add_argument("--lr", type=float, help="self-play learning rate")
    p.add_argument(
        "--start-share",
        type=float,
        help="share of groups that start after 1-6 random plies (else empty board)",
    )
    p.add_argument("--eval-positions", type=int, help="fixed positions scored by the solver")
    p.add_argument(
        "--eval-games", type=int, help="games against the random opponent per evaluation (0: skip)"
    )
    p.add_argument("--match-pairs", type=int, help="head-to-head pairs of games against the warm start")
    add_run_arguments(
        p,
        run_name="selfplay",
        check_help="exit 1 unless the trained policy beats its warm start head to head (interval above 0.5)",
    )
    args = p.parse_args(argv)
    return apply_preset(args, PRESETS["smoke" if args.smoke else "default"], run_name="selfplay")


# --- the engine --------------------------------------------------------------------------------------


def make_selfplay_engine(
    seats: Callable[[str], Any], *, chat_template: Any, seed: int, rollout_log: str | None = None
) -> Any:
    """An engine over the two-player env (``"ttt_selfplay"``, board-only prompts as in the demo) whose
    protocol ``"seats"`` puts ``seats(spec)`` behind X and O: ``seats`` maps the protocol spec's
    ``trained`` kwarg (``"both"``, ``"x"`` or ``"o"``) to a ``{"x": client, "o": client}`` mapping."""
    from common import REWARDS, make_agent

    from ludic_core.engine import RolloutEngine
    from ludic_core.protocols.multi_agent import MultiAgentProtocol
    from ludic_envs.tictactoe import TicTacToeSelfPlayEnv

    # The demo's outcome rewards for each seat, and a forfeit (the other seat's illegal move) is a win:
    # the game's result.
    rewards = {**REWARDS, "opponent_forfeit": 1.0}

    def env(start_board: str | None = None) -> TicTacToeSelfPlayEnv:
        return TicTacToeSelfPlayEnv(rewards=rewards, show_opponent_move=False, start_board=start_board)

    def protocol(trained: str = "both") -> MultiAgentProtocol:
        clients = seats(trained)
        agents = {seat: make_agent(clients[seat], chat_template=chat_template) for seat in ("x", "o")}
        return MultiAgentProtocol(agents, stop_on_parse_error=True)

    return RolloutEngine(
        env_factories={"ttt_selfplay": env},
        protocol_factories={"seats": protocol},
        base_seed=seed,
        rollout_log=rollout_log,
    )


def selfplay_requests(
    *, group_size: int, groups_per_step: int, start_share: float, seed: int
) -> Callable[[int], list[Any]]:
    """``step -> requests``: ``groups_per_step`` groups of ``group_size`` self-play games; a group's
    games share a start (the empty board, or with probability ``start_share`` a position after 1-6
    random plies) and differ in their sampling seeds."""
    import random

    from common import inference_spec, random_start

    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.seeding import derive_seed
    from ludic_core.strategies import GRPORequestStrategy

    spec = inference_spec(temperature=TRAIN_TEMPERATURE, logprobs=True)

    def requests(step: int) -> list[RolloutRequest]:
        starts = random.Random(derive_seed(seed, "selfplay-starts", step))
        bases = []
        for _ in range(groups_per_step):
            start = random_start(starts, share=start_share)
            kwargs = {} if start is None else {"start_board": start}
            bases.append(
                RolloutRequest(
                    env=EnvSpec("ttt_selfplay", kwargs=kwargs), protocol=ProtocolSpec("seats"), inference=spec
                )
            )
        return GRPORequestStrategy(group_size=group_size, seed=derive_seed(seed, "selfplay", step)).expand(
            bases
        )

    return requests


# --- head-to-head ------------------------------------------------------------------------------------


def match_requests(pairs: int, *, seed: int) -> list[Any]:
    """``pairs`` pairs of games from the empty board at T = 1: in pair ``i`` the trained policy plays X
    in one game and O in the other, on the same sampling seed."""
    from common import inference_spec

    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.seeding import derive_seed

    spec = inference_spec(temperature=TRAIN_TEMPERATURE, logprobs=False)
    return [
        RolloutRequest(
            env=EnvSpec("ttt_selfplay"),
            protocol=ProtocolSpec("seats", kwargs={"trained": seat}),
            env_seed=0,
            sampling_seed=derive_seed(seed, "match", i),
            inference=spec,
            meta={"pair": i, "trained_seat": seat},
        )
        for i in range(pairs)
        for seat in ("x", "o")
    ]


def seat_points(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Points per seat of one game from its two rollout records: win 1, draw ½, loss 0; a seat that
    moved illegally or replied out of format forfeits (0), and the other seat wins (1)."""
    from common import game_points

    by_seat = {r["agent_id"]: r for r in records}
    if set(by_seat) != {"x", "o"}:
        raise ValueError(f"a game has rollouts for seats {sorted(by_seat)}, expected x and o")
    for seat, record in by_seat.items():
        if record.get("parse_error") or record.get("illegal_reason") or record.get("failed"):
            other = "o" if seat == "x" else "x"
            return {seat: 0.0, other: 1.0}
    return {seat: game_points(record) for seat, record in by_seat.items()}


async def head_to_head(engine: Any, requests: Sequence[Any]) -> dict[str, Any]:
    """The trained policy's points per game against the warm start, per pair and overall."""
    from ludic_core.evaluation import run_eval
    from ludic_core.intervals import mean_interval

    # At most MATCH_CONCURRENCY games in flight: each seat's client holds the KV cache of its own batch,
    # and two full batches of 64 rows at once would take the run past 4 GB resident.
    settings = attrs.evolve(_settings(), concurrency=MATCH_CONCURRENCY)
    played = await run_eval(engine, requests, [], settings)
    games: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for record in played.rollouts:
        games.setdefault((record["pair"], record["trained_seat"]), []).append(record)
    points = {key: seat_points(records)[key[1]] for key, records in games.items()}
    pairs = sorted({pair for pair, _ in points})
    per_pair = [(points[(p, "x")] + points[(p, "o")]) / 2 for p in pairs]
    low, high = mean_interval(per_pair)
    return {
        "points_mean": statistics.fmean(per_pair),
        "low": low,
        "high": high,
        "pairs": len(per_pair),
        "points_as_x": statistics.fmean(points[(p, "x")] for p in pairs),
        "points_as_o": statistics.fmean(points[(p, "o")] for p in pairs),
        "win_rate": statistics.fmean(v == 1.0 for v in points.values()),
        "draw_rate": statistics.fmean(v == 0.5 for v in points.values()),
    }


def _settings() -> Any:
    from common import rollout_settings

    return rollout_settings(GAME_MOVES)


# --- the run -----------------------------------------------------------------------------------------


def frozen_copy(model: Any) -> Any:
    """A copy of ``model`` for evaluation that shares every frozen tensor with it (the base weights)
    and owns a copy of the trainable ones (the adapters): the warm start costs only its adapters."""
    shared = {id(p): p for p in model.parameters() if not p.requires_grad}
    shared.update({id(b): b for b in model.buffers()})
    clone = copy.deepcopy(model, memo=shared)
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone.eval()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from common import make_engine
    from evaluation import Evaluation
    from players import teacher_moves

    from ludic_agents.chat_template import HFChatTemplate
    from ludic_core.algorithms import grpo
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.intervals import paired_interval
    from ludic_core.loggers.console import PrintLogger
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.loggers.tee import TeeLogger
    from ludic_train.config import TrainerConfig
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.trainer import Trainer

    started = time.perf_counter()
    peaks = StagePeaks()

    model, tokenizer = start_run(args)
    template = HFChatTemplate(tokenizer)
    client = LocalPolicyClient(model, tokenizer, max_batch_size=64, seed=args.seed)
    metrics_log = JsonlLogger(args.out / "metrics.jsonl")
    base_config: dict[str, Any] = {
        "pad_token_id": tokenizer,
        "max_grad_norm": 1.0,
        "max_seq_len": 256,
        "micro_token_budget": 2048,
    }

    games, items = await teacher_moves(tokenizer, template, games=args.teacher_games, seed=args.seed + 1)
    print(f"Warm start: SFT on {len(items)} moves of {games} rules-only teacher games", flush=True)
    await warm_start(
        model,
        items,
        lr=args.sft_lr,
        steps=args.sft_steps,
        seed=args.seed,
        config=base_config,
        logger=metrics_log,
    )
    peaks.done("warm start")

    warm = frozen_copy(model)
    warm_client = LocalPolicyClient(warm, tokenizer, max_batch_size=64, seed=args.seed)
    evaluation = Evaluation(
        positions=args.eval_positions,
        games=args.eval_games,
        greedy_games=0,
        seed=args.seed,
        sampled_temperature=TRAIN_TEMPERATURE,
    )

    def single_agent_engine() -> Any:
        return make_engine(client, chat_template=template, seed=args.seed)

    evals = {"warm start": await evaluation.run(single_agent_engine(), games=args.eval_games > 0)}
    print(f"warm start: {_summary_line(evals['warm start'])}", flush=True)
    peaks.done("evaluation")

    clients = {"both": {"x": client, "o": client}, "x": {"x": client, "o": warm_client}}
    clients["o"] = {"x": warm_client, "o": client}
    engine = make_selfplay_engine(
        clients.__getitem__,
        chat_template=template,
        seed=args.seed,
        rollout_log=str(args.out / "rollouts.jsonl"),
    )
    algorithm = grpo(group_size=args.group_size)
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=RolloutBatchSource(
            engine=engine,
            credit_assigner=algorithm.credit_assigner,
            requests=selfplay_requests(
                group_size=args.group_size,
                groups_per_step=args.groups_per_step,
                start_share=args.start_share,
                seed=args.seed,
            ),
            settings=_settings(),
        ),
        config=TrainerConfig(lr=args.lr, **base_config),
        publisher=client.as_publisher(),
        logger=TeeLogger(
            PrintLogger(keys=["train/avg_total_reward", "train/loss", "train/grad_norm", "perf/step_s"]),
            metrics_log,
        ),
    )
    results = await trainer.train(args.steps)
    metrics_log.close()
    peaks.done("self-play")

    evals["self-play"] = await evaluation.run(single_agent_engine(), games=args.eval_games > 0)
    print(f"self-play: {_summary_line(evals['self-play'])}", flush=True)
    peaks.done("evaluation")
    match = await head_to_head(engine, match_requests(args.match_pairs, seed=args.seed))
    peaks.done("evaluation")
    gains = {
        name: paired_interval(evals["warm start"]["paired"][name], evals["self-play"]["paired"][name])
        for name in evals["self-play"]["paired"]
    }
    rewards = [r["train/avg_total_reward"] for r in results]
    summary: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "wall_s": time.perf_counter() - started,
        "peak_rss_mb": peaks.peak,
        "peak_rss_mb_by_stage": peaks.by_stage,
        "head_to_head": match,
        "gain_over_warm_start": gains,
        "evaluations": {k: {n: v for n, v in e.items() if n != "paired"} for k, e in evals.items()},
        "train_reward": rewards,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(
        f"Head-to-head against the warm start: {match['points_mean']:.3f} points per game "
        f"(95% interval [{match['low']:.3f}, {match['high']:.3f}], {match['pairs']} pairs; "
        f"as X {match['points_as_x']:.3f}, as O {match['points_as_o']:.3f})"
    )
    for name, g in gains.items():
        print(
            f"self-play − warm start, {name}: {g['mean']:+.3f} (paired 95% interval [{g['low']:+.3f}, {g['high']:+.3f}])"
        )
    print(
        f"Wall time {summary['wall_s']:.0f} s, peak resident memory {summary['peak_rss_mb']} MiB; files in {args.out}/"
    )
    return summary


def _summary_line(evaluation: dict[str, Any]) -> str:
    parts = [f"{k}={v:.3f}" for k, v in evaluation["positions"].items()]
    if "sampled_games" in evaluation:
        parts.append(f"points vs random={evaluation['sampled_games']['points_mean']:.3f}")
    return ", ".join(parts)


def check(summary: dict[str, Any]) -> list[str]:
    """``--check``: self-play raised its own reward (last two steps over the first two) by at least
    :data:`MIN_REWARD_RISE`, and the trained policy beats its warm start head to head beyond noise.
    Returns the promises broken."""
    rise = reward_rise_problem(summary["train_reward"], margin=MIN_REWARD_RISE, label="self-play")
    broken = [] if rise is None else [rise]
    match = summary["head_to_head"]
    if not match["low"] > 0.5:
        broken.append(
            f"head-to-head points {match['points_mean']:.3f}, 95% interval [{match['low']:.3f}, {match['high']:.3f}] "
            "is not above 0.5"
        )
    return broken


if __name__ == "__main__":
    run_script("selfplay", parse_args, main, check)
