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

from ludic_core.cli.command import Command
from ludic_core.cli.progress import Progress
from ludic_core.cli.run_arguments import add_run_arguments, flags_of
from ludic_core.cli.table import print_table
from ludic_core.evaluation import run_eval
from ludic_core.run.backends import check_backend, make_backend
from ludic_core.run.configs import EvalConfig
from ludic_core.run.episodes import build_episodes, check_env_builds, episodes_logged_in, first_request
from ludic_core.run.loading import load_config
from ludic_core.run.profiles import eval_reducers, resolve_profile
from ludic_core.run.run_dir import create_run_dir

__all__ = ["COMMAND", "run"]


async def _evaluate(config: EvalConfig, run_dir: Path) -> dict[str, Any]:
    profile = resolve_profile(config.env)
    backend = make_backend(config.backend)
    try:
        engine, requests = build_episodes(config, profile=profile, backend=backend, run_dir=run_dir)
        with Progress(f"eval {config.env}", len(requests)) as bar, episodes_logged_in(run_dir):
            result = await run_eval(
                engine,
                requests,
                eval_reducers(profile, samples_per_prompt=config.samples_per_prompt, pass_k=config.pass_k),
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
    check_env_builds(first_request(config, resolve_profile(config.env)), config)  # and an unknown env name
    run_dir = create_run_dir("eval", config.env, config, config.run_dir)
    metrics = asyncio.run(_evaluate(config, run_dir))
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    rows = [(name, value) for name, value in metrics.items() if not name.startswith("num_")]
    rows.append(("episodes", metrics["num_episodes"]))
    if metrics["num_rollouts"] != metrics["num_episodes"]:  # a rollout per seat (multi_agent)
        rows.append(("rollouts", metrics["num_rollouts"]))
    rows.append(("failed_episodes", metrics["num_failed_episodes"]))
    print_table(f"ludic eval {config.env} ({config.backend.kind}: {config.backend.model})", rows)
    print(f"run directory: {run_dir}", file=sys.stderr)
    return 0


COMMAND = Command(
    help="evaluate a model on an env: outcome rates, accuracy, pass@k; every episode to JSONL",
    add_arguments=add_run_arguments,
    run=run,
)
