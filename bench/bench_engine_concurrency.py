"""Rollout-engine concurrency efficiency against an ideal scheduler with the same model latency.

Rollouts are I/O-bound: an episode spends almost all its time waiting for the model. This benchmark
gives every model call a fixed latency (a scripted client that sleeps ``--latency-ms``) and runs the
same GuessNumber episodes through ``RolloutEngine.generate_rollouts`` at several concurrency limits.
Episodes take different numbers of model calls, so two ideals are computed from the calls each episode
actually made:

* ``lower_bound`` — ``max(total_calls / C, longest_episode_calls) × latency``: no scheduler can beat it.
* ``fifo_ideal`` — a zero-overhead executor that, like the engine's semaphore, starts episodes in
  request order whenever one of ``C`` slots frees up (list scheduling, simulated exactly).

The same episodes also run as a bare asyncio loop at the same concurrency (a semaphore and the minimal
hand-written episode loop, no engine), measured in the same run: its efficiency is what the client,
env and event loop allow on this machine, and ``engine_vs_bare`` (bare wall / engine wall) is the part
the engine itself loses. When the bare loop is far from 1.0, per-call CPU time of the client and env
(not the engine) is what stops the machine from keeping that many calls in flight.

Each side's process CPU time is recorded too, per model call, next to the budget one core has per call
when ``C`` calls share the latency (``latency / C``): a side whose CPU per call exceeds that budget
cannot keep ``C`` calls in flight, however it schedules them. So is the share of that CPU time spent in
the garbage collector (``gc.callbacks``), which grows with the number of objects alive at once.

Prints one JSON object: for each concurrency, the wall times, both ideals and the efficiencies
``ideal / measured`` (1.0 is perfect; what is lost is the engine's own work and event-loop scheduling),
and the CPU per call of both sides with the budget.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import sys
import time

from _cpu_timer import CPUTimer
from _guess_number import bare_episode, make_client, make_engine, requests
from _machine import emit, machine_facts

from ludic_core import RolloutSettings


async def run_engine(
    episodes: int, max_steps: int, concurrency: int, latency_s: float
) -> tuple[float, list[int]]:
    """Wall seconds and the model calls of each episode, in request order."""
    engine = make_engine(latency_s)
    started = time.perf_counter()
    result = await engine.generate_rollouts(
        requests(episodes), RolloutSettings(max_steps=max_steps, concurrency=concurrency)
    )
    wall = time.perf_counter() - started
    failed = [r for r in result.rollouts if r.failed]
    if failed:
        print(f"{len(failed)} episodes failed, e.g. {failed[0].failure}", file=sys.stderr)
        raise SystemExit(1)
    calls_by_seed = {r.meta["engine"]["env_seed"]: len(r.agent_steps) for r in result.rollouts}
    return wall, [calls_by_seed[seed] for seed in range(episodes)]


async def run_bare(episodes: int, max_steps: int, concurrency: int, latency_s: float) -> float:
    """Wall seconds of the bare loop over the same episodes, ``concurrency`` at a time."""
    client = make_client(latency_s)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(episode: int) -> int:
        async with semaphore:
            return await bare_episode(client, episode, max_steps)

    started = time.perf_counter()
    await asyncio.gather(*(one(e) for e in range(episodes)))
    return time.perf_counter() - started


def fifo_makespan(calls: list[int], slots: int, latency_s: float) -> float:
    """Finish time of list scheduling: each episode, in order, takes the earliest free slot."""
    free_at = [0.0] * min(slots, len(calls))
    heapq.heapify(free_at)
    finish = 0.0
    for n in calls:
        end = heapq.heappop(free_at) + n * latency_s
        finish = max(finish, end)
        heapq.heappush(free_at, end)
    return finish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64, 256])
    args = parser.parse_args()
    facts = machine_facts()
    latency_s = args.latency_ms / 1000

    results = {}
    for concurrency in args.concurrency:
        # Each side starts from a collected heap (see CPUTimer).
        with CPUTimer() as bare_cpu:
            bare = asyncio.run(run_bare(args.episodes, args.max_steps, concurrency, latency_s))
        with CPUTimer() as engine_cpu:
            wall, calls = asyncio.run(run_engine(args.episodes, args.max_steps, concurrency, latency_s))
        lower_bound = max(sum(calls) / concurrency, max(calls)) * latency_s
        fifo = fifo_makespan(calls, concurrency, latency_s)
        results[str(concurrency)] = {
            "wall_s": wall,
            "bare_loop_wall_s": bare,
            "lower_bound_s": lower_bound,
            "fifo_ideal_s": fifo,
            "efficiency_vs_lower_bound": lower_bound / wall,
            "efficiency_vs_fifo_ideal": fifo / wall,
            "bare_loop_efficiency_vs_fifo_ideal": fifo / bare,
            "engine_vs_bare": bare / wall,
            "model_calls": sum(calls),
            # What limits the fraction of ideal: the CPU each model call (with its env step) costs,
            # against the CPU one core has per call when `concurrency` calls share the latency.
            "cpu_us_per_call": engine_cpu.seconds / sum(calls) * 1e6,
            "bare_loop_cpu_us_per_call": bare_cpu.seconds / sum(calls) * 1e6,
            "cpu_budget_us_per_call": latency_s / concurrency * 1e6,
            # The part of that CPU spent in the garbage collector: it grows with the objects alive at
            # once (the episodes in flight and what the engine keeps until it returns them).
            "gc_cpu_share": engine_cpu.gc_seconds / engine_cpu.seconds,
            "bare_loop_gc_cpu_share": bare_cpu.gc_seconds / bare_cpu.seconds,
        }
        print(
            f"concurrency {concurrency}: {wall:.3f} s (bare loop {bare:.3f} s, fifo ideal {fifo:.3f} s)",
            file=sys.stderr,
        )
    result = {
        "benchmark": "engine_concurrency",
        "episodes": args.episodes,
        "max_steps": args.max_steps,
        "latency_ms": args.latency_ms,
        "by_concurrency": results,
        "min_efficiency_vs_fifo_ideal": min(r["efficiency_vs_fifo_ideal"] for r in results.values()),
    }
    headline = {
        f"efficiency vs FIFO ideal, concurrency {c}": round(r["efficiency_vs_fifo_ideal"], 3)
        for c, r in results.items()
    }
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
