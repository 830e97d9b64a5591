"""Rollout-engine overhead per env step, against a minimal hand-written loop in the same process.

Both sides play the same GuessNumber episodes (same env seeds, same scripted replies, same text
rendering and byte tokenisation, a zero-latency scripted client), so they make the same model calls and
env steps; the difference is what the engine adds: a fresh env and protocol per episode, the protocol's
timeline (AgentStep/EnvironmentStep objects, turn ids, truncation marks), seeds, meta, per-call and
per-episode timeouts and the worker tasks. A third measurement adds credit assignment and SAW-item
building (``generate_batch``), a fourth plays with the agent users run (``full_c64``:
``ludic_agents.Agent``, its full dialog, a chat template, a parser) instead of the minimal test agent. A second baseline, ``baseline_keeping``, is the same loop keeping every
step's response and env outcome until it returns, as the engine keeps its rollouts: the
``cpu_ratio_engine_c64_vs_baseline_keeping`` ratio leaves out what only holding on to results costs.

The machine may be shared, so every measurement runs ``--repeats`` times, interleaved (baseline,
keeping baseline, engine, engine, batch, then again), and the medians are compared: a burst of load
hits every side alike. Each
side's process CPU time is recorded as well as its wall time: on a loaded machine the wall clock also
counts time the process spent waiting for a core, the CPU time only the work it did, and the ``cpu_*``
ratios (medians of the same interleaved repeats) are the steadier measure of the engine's overhead.
The CPU time each side spent in the garbage collector is reported too (``gc.callbacks``): the engine
returns every rollout it ran, so its collections traverse a growing result set, the bare loop's do not.

Prints one JSON object: median seconds per env step for each side and the ratios to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from _cpu_timer import CPUTimer
from _guess_number import bare_episode, make_client, make_engine, make_full_engine, requests
from _machine import emit, machine_facts

from ludic_core import RolloutSettings
from ludic_core.credit import MonteCarloReturn


async def baseline(episodes: int, max_steps: int) -> int:
    """The minimal loop over every episode in turn. Returns env steps taken."""
    client = make_client()
    return sum([await bare_episode(client, episode, max_steps) for episode in range(episodes)])


async def baseline_keeping(episodes: int, max_steps: int) -> int:
    """The minimal loop that also keeps every step's response and env outcome until it returns, as
    the engine keeps its rollouts: how much of the engine's cost is only holding on to results."""
    client = make_client()
    kept: list[object] = []
    return sum([await bare_episode(client, episode, max_steps, kept) for episode in range(episodes)])


async def engine_rollouts(episodes: int, max_steps: int, concurrency: int, *, full: bool = False) -> int:
    """The engine's episodes, with the minimal test agent or (``full``) with ``ludic_agents.Agent``."""
    result = await (make_full_engine() if full else make_engine()).generate_rollouts(
        requests(episodes), RolloutSettings(max_steps=max_steps, concurrency=concurrency)
    )
    return sum(len(r.env_steps) for r in result.rollouts)


async def engine_batch(episodes: int, max_steps: int, concurrency: int) -> int:
    engine = make_engine()
    batch = await engine.generate_batch(
        requests(episodes),
        RolloutSettings(max_steps=max_steps, concurrency=concurrency),
        credit_assigner=MonteCarloReturn(),
    )
    return sum(1 for item in batch.items if item.meta["step_kind"] == "env")


def timed(fn: Callable[[], Coroutine[Any, Any, int]]) -> tuple[float, float, float, int]:
    """Wall seconds, process CPU seconds, CPU seconds in the garbage collector and env steps of one run
    (from a collected heap, see CPUTimer)."""
    with CPUTimer() as cpu:
        started = time.perf_counter()
        steps = asyncio.run(fn())
        wall = time.perf_counter() - started
    return wall, cpu.seconds, cpu.gc_seconds, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    facts = machine_facts()
    n, k = args.episodes, args.max_steps

    sides: dict[str, Callable[[], Coroutine[Any, Any, int]]] = {
        "baseline": lambda: baseline(n, k),
        "baseline_keeping": lambda: baseline_keeping(n, k),
        "engine_c1": lambda: engine_rollouts(n, k, 1),
        "engine_c64": lambda: engine_rollouts(n, k, 64),
        "engine_batch_c64": lambda: engine_batch(n, k, 64),
        "full_c64": lambda: engine_rollouts(n, k, 64, full=True),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu_times: dict[str, list[float]] = {name: [] for name in sides}
    gc_times: dict[str, list[float]] = {name: [] for name in sides}
    steps: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, fn in sides.items():
            seconds, cpu_seconds, gc_seconds, steps[name] = timed(fn)
            times[name].append(seconds)
            cpu_times[name].append(cpu_seconds)
            gc_times[name].append(gc_seconds)
    if len(set(steps.values())) != 1:
        print(f"step counts differ: {steps}", file=sys.stderr)
        raise SystemExit(1)
    env_steps = steps["baseline"]
    median = {name: statistics.median(ts) for name, ts in times.items()}
    cpu = {name: statistics.median(ts) for name, ts in cpu_times.items()}
    in_gc = {name: statistics.median(ts) for name, ts in gc_times.items()}
    emit(
        {
            "benchmark": "engine_overhead",
            "episodes": n,
            "max_steps": k,
            "repeats": args.repeats,
            "env_steps": env_steps,
            "seconds_per_env_step": {name: t / env_steps for name, t in median.items()},
            "ratio_engine_c1_vs_baseline": median["engine_c1"] / median["baseline"],
            "ratio_engine_c64_vs_baseline": median["engine_c64"] / median["baseline"],
            "ratio_engine_batch_vs_baseline": median["engine_batch_c64"] / median["baseline"],
            "ratio_post_rollout_vs_baseline": (median["engine_batch_c64"] - median["engine_c64"])
            / median["baseline"],
            "overhead_us_per_env_step_c1": (median["engine_c1"] - median["baseline"]) / env_steps * 1e6,
            "cpu_seconds_per_env_step": {name: t / env_steps for name, t in cpu.items()},
            "cpu_ratio_engine_c1_vs_baseline": cpu["engine_c1"] / cpu["baseline"],
            "cpu_ratio_engine_c64_vs_baseline": cpu["engine_c64"] / cpu["baseline"],
            "cpu_ratio_engine_batch_vs_baseline": cpu["engine_batch_c64"] / cpu["baseline"],
            "cpu_ratio_engine_c64_vs_baseline_keeping": cpu["engine_c64"] / cpu["baseline_keeping"],
            "cpu_ratio_full_c64_vs_baseline": cpu["full_c64"] / cpu["baseline"],
            # Part of the CPU time above spent in the garbage collector (gc.callbacks).
            "gc_cpu_seconds_per_env_step": {name: t / env_steps for name, t in in_gc.items()},
        },
        facts=facts,
        headline={
            "engine overhead per env step, concurrency 1 (µs)": round(
                (median["engine_c1"] - median["baseline"]) / env_steps * 1e6, 1
            ),
            "CPU, engine / bare loop, concurrency 1": round(cpu["engine_c1"] / cpu["baseline"], 2),
            "CPU, engine / bare loop, concurrency 64": round(cpu["engine_c64"] / cpu["baseline"], 2),
            "CPU, engine batch / bare loop, concurrency 64": round(
                cpu["engine_batch_c64"] / cpu["baseline"], 2
            ),
            "CPU, full agent / bare loop, concurrency 64": round(cpu["full_c64"] / cpu["baseline"], 2),
        },
    )


if __name__ == "__main__":
    main()
