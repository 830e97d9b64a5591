"""The Tic-Tac-Toe examples' evaluation: the same positions and games for every checkpoint, keyed so that
two checkpoints can be compared item by item (:func:`ludic_core.intervals.paired_interval`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from common import (
    MAX_MOVES,
    eval_requests,
    game_points,
    optimal_move,
    outcome,
    outcome_reducers,
    position_reducers,
    position_requests,
    rollout_settings,
    sample_positions,
)

from ludic_core.evaluation import run_eval
from ludic_core.seeding import derive_seed


class Evaluation:
    """The same positions and games for every stage; results keyed by env seed for pairing.

    Positions are scored greedily. Games are played greedily and, with the same opponent and sampling
    seeds, at the training temperature: GRPO optimises the sampled policy, and greedy play shows
    only the changes that move a position's most likely move."""

    def __init__(
        self, *, positions: int, games: int, greedy_games: int, seed: int, sampled_temperature: float
    ) -> None:
        self.positions = sample_positions(positions, seed=derive_seed(seed, "eval-positions"))
        self.position_requests = position_requests(self.positions, seed=seed)
        self.game_requests = {
            "sampled": eval_requests(episodes=games, seed=seed, temperature=sampled_temperature)
        }
        if greedy_games:
            self.game_requests["greedy"] = eval_requests(episodes=greedy_games, seed=seed)

    async def run(
        self,
        engine: Any,
        *,
        games: bool = True,
        max_positions: int | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """``progress`` gets a short note (``"positions 40/200"``) after every finished episode."""

        def note(part: str) -> Callable[[int, int], None] | None:
            if progress is None:
                return None
            return lambda done, total: progress(f"{part} {done}/{total}")

        t0 = time.perf_counter()
        result: dict[str, Any] = {}
        position_requests = self.position_requests[:max_positions]
        pos = await run_eval(
            engine, position_requests, position_reducers(), rollout_settings(1), progress=note("positions")
        )
        result["positions"] = {k: v for k, v in pos.metrics.items() if k.endswith("_rate")}
        by_seed = {r["env_seed"]: r for r in pos.rollouts}
        result["paired"] = {
            "optimal_move": [float(optimal_move(by_seed[q.env_seed])) for q in position_requests]
        }
        for mode, requests in self.game_requests.items() if games else ():
            played = await run_eval(
                engine,
                requests,
                outcome_reducers(),
                rollout_settings(MAX_MOVES),
                progress=note(f"{mode} games"),
            )
            metrics = {k: v for k, v in played.metrics.items() if k.endswith(("_rate", "_mean"))}
            by_seed = {r["env_seed"]: r for r in played.rollouts}
            records = [by_seed[q.env_seed] for q in requests]
            result["paired"][f"{mode}_game_points"] = [game_points(r) for r in records]
            metrics["points_mean"] = statistics.fmean(result["paired"][f"{mode}_game_points"])
            for mark in ("X", "O"):
                mine = [r for r in records if r.get("mark") == mark]
                for name in ("win", "draw"):
                    if mine:
                        metrics[f"{name}_rate_as_{mark}"] = sum(outcome(r) == name for r in mine) / len(mine)
            result[f"{mode}_games"] = metrics
        result["seconds"] = time.perf_counter() - t0
        return result
