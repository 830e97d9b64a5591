"""``ludic rollouts <env> --keep <filter> [-o data.jsonl]``: collect rollouts for rejection sampling and
SFT data from any backend.

Kept rollouts are appended to ``-o`` (default ``<run_dir>/rollouts.jsonl``) as they finish; finished
requests go to ``<output>.requests.jsonl``, so a rerun with the same output resumes where it stopped
(failed episodes are retried). ``<output>.run.json`` holds what fixes the requests; a rerun with other
values is refused rather than mixing two datasets. More than ``rollout.max_failure_rate`` failed
episodes exits non-zero with the first cause. The table ends with the rate of each of the env profile's
outcomes (``counts.json``). Message-level (``openai``) rollouts carry no token ids: re-tokenise them with
the student's chat template before SFT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

from ludic_core.cli.command import Command
from ludic_core.cli.progress import Progress
from ludic_core.cli.run_arguments import add_run_arguments, flags_of
from ludic_core.cli.table import print_table
from ludic_core.engine import EpisodeResult
from ludic_core.errors import ConfigError, DataError
from ludic_core.evaluation import rollout_record
from ludic_core.jsonl import read_jsonl
from ludic_core.rollout_log import RolloutLog
from ludic_core.run.backends import check_backend, make_backend
from ludic_core.run.configs import RolloutsConfig
from ludic_core.run.episodes import build_episodes, check_env_builds, episodes_logged_in, first_request
from ludic_core.run.keep import parse_keep
from ludic_core.run.loading import load_config
from ludic_core.run.profiles import resolve_profile
from ludic_core.run.run_dir import choose_run_dir, create_run_dir

__all__ = ["COMMAND", "DEFAULT_OUTPUT", "done_request_ids", "run"]

DEFAULT_OUTPUT = "rollouts.jsonl"
"""Where kept rollouts go, inside the run directory, when ``output`` is not given."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        help="the JSONL file kept rollouts are appended to (default <run-dir>/rollouts.jsonl)",
    )
    parser.add_argument(
        "--keep",
        help="which rollouts to keep: all (default), success, an outcome, reward>0, ... (comma = and)",
    )


def _ledger_entry(line: str) -> str:
    try:
        entry = json.loads(line)
    except ValueError as exc:
        raise DataError(f"not JSON: {exc}") from exc
    if not isinstance(entry, dict) or not isinstance(entry.get("request_id"), str):
        raise DataError(f"expected an object with a str request_id, got {line.strip()!r:.200}")
    return str(entry["request_id"])


def done_request_ids(ledger: Path) -> set[str]:
    """The request ids a previous run over the same output finished."""
    if not ledger.exists():
        return set()
    return set(read_jsonl(ledger, _ledger_entry))


def _identity(config: RolloutsConfig) -> dict[str, Any]:
    return {
        "env": config.env,
        "env_kwargs": config.env_kwargs,
        "protocol": config.protocol,
        "agent": config.agent,
        "agent_kwargs": config.agent_kwargs,
        "seed": config.seed,
        "samples_per_prompt": config.samples_per_prompt,
        "vary_starts": config.vary_starts,
    }


def _check_same_run(path: Path, config: RolloutsConfig) -> None:
    identity = json.loads(json.dumps(_identity(config), default=str))
    if path.exists():
        previous = json.loads(path.read_text())
        if previous != identity:
            raise ConfigError(
                f"{config.output!r} was collected with {previous}, not {identity}; resuming would mix two "
                "datasets: choose another --output or the same env, env_kwargs, protocol, agent, agent_kwargs, seed, "
                "samples_per_prompt and vary_starts"
            )
    else:
        path.write_text(json.dumps(identity, indent=2) + "\n")


def _append_line(path: Path, entry: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


async def _collect(config: RolloutsConfig, run_dir: Path) -> tuple[dict[str, int], Counter[str]]:
    profile = resolve_profile(config.env)
    keep = parse_keep(config.keep, profile)
    output = Path(config.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    _check_same_run(output.with_name(output.name + ".run.json"), config)
    ledger = output.with_name(output.name + ".requests.jsonl")
    done = done_request_ids(ledger)
    kept_log = RolloutLog(output)
    backend = make_backend(config.backend)
    counts = {"requests": 0, "skipped_done": 0, "rollouts": 0, "kept": 0, "failed_episodes": 0}
    outcomes: Counter[str] = Counter()  # the profile's outcome of each rollout this run collected
    try:
        engine, requests = build_episodes(config, profile=profile, backend=backend, run_dir=run_dir)
        counts["requests"] = len(requests)
        todo = [r for r in requests if r.meta["request_id"] not in done]
        counts["skipped_done"] = len(requests) - len(todo)

        progress = Progress(f"rollouts {config.env}", len(requests), done=counts["skipped_done"])
        with progress as bar, episodes_logged_in(run_dir):

            def on_episode_done(episode: EpisodeResult) -> None:
                kept = [r for r in episode.rollouts if not episode.failed and keep(rollout_record(r))]
                kept_log.write(kept)
                # The ledger line goes last: a crash between the two writes reruns the request, and
                # its rollouts may then appear twice in the output, but none is ever lost. A failed
                # episode gets no ledger line, so a rerun (the server fixed) runs it again.
                if not episode.failed:
                    _append_line(
                        ledger, {"request_id": episode.request.meta["request_id"], "kept": len(kept)}
                    )
                for rollout in episode.rollouts:
                    outcomes["failed" if episode.failed else str(profile.label(rollout_record(rollout)))] += 1
                counts["rollouts"] += len(episode.rollouts)
                counts["kept"] += len(kept)
                counts["failed_episodes"] += int(episode.failed)
                bar.advance()

            await engine.generate_rollouts(todo, config.rollout, on_episode_done=on_episode_done)
    finally:
        await backend.aclose()
    return counts, outcomes


def run(args: argparse.Namespace) -> int:
    extra = {"output": ("output",), "keep": ("keep",)}
    config = load_config(
        RolloutsConfig, files=args.config, flags=flags_of(args, extra), overrides=args.overrides
    )
    # Everything that can be refused cheaply is, before the run directory exists.
    check_backend(config.backend)
    check_env_builds(first_request(config, resolve_profile(config.env)), config)  # and an unknown env name
    # The run directory is fixed first so that the default output lies in it, and config.json records
    # both: rerunning it (`--config <run_dir>/config.json`) resumes the same collection.
    chosen = choose_run_dir("rollouts", config.env, config.run_dir)
    config = attrs.evolve(config, run_dir=str(chosen), output=config.output or str(chosen / DEFAULT_OUTPUT))
    run_dir = create_run_dir("rollouts", config.env, config, config.run_dir)
    counts, outcomes = asyncio.run(_collect(config, run_dir))
    (run_dir / "counts.json").write_text(json.dumps({**counts, "outcomes": dict(outcomes)}, indent=2) + "\n")
    total = sum(outcomes.values())
    rates = [(f"{label}_rate", count / total) for label, count in sorted(outcomes.items())]
    title = f"ludic rollouts {config.env} -> {config.output} (keep {config.keep})"
    print_table(title, [*counts.items(), *rates])
    print(f"kept rollouts: {config.output}; run directory: {run_dir}", file=sys.stderr)
    return 0


COMMAND = Command(
    help="collect rollouts from any backend, keep those a filter selects (resumable)",
    add_arguments=_add_arguments,
    run=run,
)
