"""``ludic eval <env>``: run a model on an env and print its outcome rates.

Every episode goes to ``<run_dir>/episodes.jsonl`` (rollouts, :mod:`ludic_core.rollout_log`), the
per-rollout records to ``records.jsonl`` and the metrics to ``metrics.json``. The table lists the rate
of each outcome of the env's profile (Tic-Tac-Toe: win / draw / loss / illegal / parse_error; QA:
correct / wrong / no_answer / parse_error), accuracy and pass@k when the env defines success (a reply
that never parsed and a failed episode count as wrong), the mean reward and the failure count.

A run in which more than ``rollout.max_failure_rate`` of the episodes failed (a dead server, a wrong
model name) exits non-zero with the first failure's cause, once every episode is logged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from ludic_core.cli.backends import check_backend, make_backend
from ludic_core.cli.command import Command
from ludic_core.cli.config import load_config
from ludic_core.cli.episodes import (
    add_run_arguments,
    build_episodes,
    check_env_builds,
    episodes_logged_in,
    first_request,
    flags_of,
)
from ludic_core.cli.profiles import EvalProfile, resolve_profile
from ludic_core.cli.progress import Progress
from ludic_core.cli.run_config import EvalConfig
from ludic_core.cli.run_dir import create_run_dir
from ludic_core.cli.table import print_table
from ludic_core.evaluation import MeanAtK, MetricReducer, PassAtK, Reducer, run_eval

__all__ = ["COMMAND", "eval_reducers", "run"]


def eval_reducers(profile: EvalProfile, config: EvalConfig) -> list[MetricReducer]:
    reducers: list[MetricReducer] = [
        Reducer(f"{label}_rate", _is(profile, label), "rate", "rollouts") for label in profile.outcomes
    ]
    if profile.success is not None:
        success = profile.success
        reducers.append(Reducer("accuracy", lambda record: bool(success(record)), "rate", "rollouts"))
        if config.samples_per_prompt > 1:
            reducers.extend(PassAtK(success, k) for k in config.pass_k)
            reducers.append(MeanAtK(success, config.samples_per_prompt, name="mean_accuracy_per_prompt"))
    reducers.append(Reducer("reward_mean", "total_reward", "mean", "rollouts"))
    return reducers


def _is(profile: EvalProfile, label: str) -> Any:
    return lambda record: profile.label(record) == label


async def _evaluate(config: EvalConfig, run_dir: Path) -> dict[str, Any]:
    profile = resolve_profile(config.env)
    backend = make_backend(config.backend)
    try:
        engine, requests = build_episodes(config, profile=profile, backend=backend, run_dir=run_dir)
        with Progress(f"eval {config.env}", len(requests)) as bar, episodes_logged_in(run_dir):
            result = await run_eval(
                engine,
                requests,
                eval_reducers(profile, config),
                config.rollout,
                progress=lambda _done, _total: bar.advance(),
            )
    finally:
        await backend.aclose()
    with (run_dir / "records.jsonl").open("w") as file:
        for record in result.rollouts:
            file.write(json.dumps({**record, "outcome": profile.label(record)}, default=str) + "\n")
    return result.metrics


def run(args: argparse.Namespace) -> int:
    config = load_config(EvalConfig, files=args.config, flags=flags_of(args), overrides=args.overrides)
    # Everything that can be refused cheaply is, before the run directory exists.
    check_backend(config.backend)
    check_env_builds(first_request(config, resolve_profile(config.env)))  # and an unknown env name
    run_dir = create_run_dir("eval", config.env, config, config.run_dir)
    metrics = asyncio.run(_evaluate(config, run_dir))
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    rows = [(name, value) for name, value in metrics.items() if not name.startswith("num_")]
    rows += [("episodes", metrics["num_rollouts"]), ("failed_episodes", metrics["num_failed_episodes"])]
    print_table(f"ludic eval {config.env} ({config.backend.kind}: {config.backend.model})", rows)
    print(f"run directory: {run_dir}", file=sys.stderr)
    return 0


COMMAND = Command(
    help="evaluate a model on an env: outcome rates, accuracy, pass@k; every episode to JSONL",
    add_arguments=add_run_arguments,
    run=run,
)
