"""Rollout-engine concurrency efficiency against an ideal scheduler with the same model latency.

Rollouts are I/O-bound: an episode spends almost all its time waiting for the model. This benchmark
gives every model call a fixed latency (a scripted client that sleeps ``--latency-ms``) and runs the
same GuessNumber episodes through ``RolloutEngine.generate_rollouts`` at several concurrency limits,
with two agents: the minimal test agent (``engine``) and the path users run, ``ludic_agents.Agent``
with a full dialog and a chat template (``full_agent``). Two workloads run at each concurrency ``C``:
one wave of ``--episodes`` episodes, and ``--waves W`` waves (``W × C`` episodes, so every slot is
refilled W times and the run is CPU-bound at large ``C``).
Episodes take different numbers of model calls, so two ideals are computed from the calls each episode
actually made:

* ``lower_bound`` — ``max(total_calls / C, longest_episode_calls) × latency``: no scheduler can beat it.
* ``fifo_ideal`` — a zero-overhead executor that, like the engine's semaphore, starts episodes in
  request order whenever one of ``C`` slots frees up (list scheduling, simulated exactly).

The same episodes also run as a bare asyncio loop at the same concurrency (a semaphore and the minimal
hand-written episode loop, no engine), measured in the same run: its efficiency is what the client,
env and event loop allow on this machine, and ``efficiency_over_bare_loop`` (an agent path's fraction
of ideal over the bare loop's) is the part the engine and agent lose. When the bare loop is far from 1.0, per-call CPU time of the client and env
(not the engine) is what stops the machine from keeping that many calls in flight.

Each side's process CPU time is recorded too, per model call, next to the budget one core has per call
when ``C`` calls share the latency (``latency / C``): a side whose CPU per call exceeds that budget
cannot keep ``C`` calls in flight, however it schedules them. So is the share of that CPU time spent in
the garbage collector (``gc.callbacks``), which grows with the number of objects alive at once.

Prints one JSON object: for each concurrency, the wall times, both ideals and the efficiencies
``ideal / measured`` (1.0 is perfect; what is lost is the engine's own work and event-loop scheduling),
and the CPU per call of every side with the budget.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import sys
import time

from _cpu_timer import CPUTimer
from _guess_number import bare_episode, make_client, make_engine, make_full_engine, requests
from _machine import emit, machine_facts

from ludic_core import RolloutSettings

ENGINES = {"engine": make_engine, "full_agent": make_full_engine}


async def run_engine(
    agent: str, episodes: int, max_steps: int, concurrency: int, latency_s: float
) -> tuple[float, list[int]]:
    """Wall seconds and the model calls of each episode, in request order."""
    engine = ENGINES[agent](latency_s)
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


def measure(
    agent: str, episodes: int, max_steps: int, concurrency: int, latency_s: float, bare: dict[str, float]
) -> dict[str, float]:
    """One agent's run at one concurrency, against the bare loop's run (``bare``) on the same episodes."""
    # Each side starts from a collected heap (see CPUTimer).
    with CPUTimer() as cpu:
        wall, calls = asyncio.run(run_engine(agent, episodes, max_steps, concurrency, latency_s))
    lower_bound = max(sum(calls) / concurrency, max(calls)) * latency_s
    fifo = fifo_makespan(calls, concurrency, latency_s)
    return {
        "wall_s": wall,
        "lower_bound_s": lower_bound,
        "fifo_ideal_s": fifo,
        "efficiency_vs_lower_bound": lower_bound / wall,
        "efficiency_vs_fifo_ideal": fifo / wall,
        # The fraction of ideal this agent path reaches over the bare loop's on the same episodes (the
        # same ideal, so the ratio of walls): what the engine and agent lose beyond what the client,
        # env and event loop allow here.
        "efficiency_over_bare_loop": bare["wall_s"] / wall,
        "model_calls": sum(calls),
        # What limits the fraction of ideal: the CPU each model call (with its env step) costs,
        # against the CPU one core has per call when `concurrency` calls share the latency.
        "cpu_us_per_call": cpu.seconds / sum(calls) * 1e6,
        "cpu_over_bare_loop": cpu.seconds / bare["cpu_s"],
        # The part of that CPU spent in the garbage collector: it grows with the objects alive at
        # once (the episodes in flight and what the engine keeps until it returns them).
        "gc_cpu_share": cpu.gc_seconds / cpu.seconds,
    }


def run_point(episodes: int, max_steps: int, concurrency: int, latency_s: float) -> dict[str, object]:
    """The bare loop and both agent paths on the same episodes at one concurrency."""
    with CPUTimer() as bare_cpu:
        bare_wall = asyncio.run(run_bare(episodes, max_steps, concurrency, latency_s))
    bare = {"wall_s": bare_wall, "cpu_s": bare_cpu.seconds}
    sides = {agent: measure(agent, episodes, max_steps, concurrency, latency_s, bare) for agent in ENGINES}
    calls = sides["engine"]["model_calls"]
    fifo = sides["engine"]["fifo_ideal_s"]
    return {
        "episodes": episodes,
        "bare_loop": {
            "wall_s": bare_wall,
            "efficiency_vs_fifo_ideal": fifo / bare_wall,
            "cpu_us_per_call": bare_cpu.seconds / calls * 1e6,
            "gc_cpu_share": bare_cpu.gc_seconds / bare_cpu.seconds,
        },
        **sides,
        "cpu_budget_us_per_call": latency_s / concurrency * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--episodes", type=int, default=256, help="episodes of the one-wave workload")
    parser.add_argument("--waves", type=int, default=4, help="the refilled workload runs waves × C episodes")
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=3, help="runs per point; the median ratio is kept")
    args = parser.parse_args()
    facts = machine_facts()
    latency_s = args.latency_ms / 1000

    workloads = {"one_wave": lambda c: args.episodes, f"{args.waves}_waves": lambda c: args.waves * c}
    results: dict[str, dict[str, object]] = {name: {} for name in workloads}
    for name, episodes_at in workloads.items():
        for concurrency in args.concurrency:
            episodes = episodes_at(concurrency)
            runs = [run_point(episodes, args.max_steps, concurrency, latency_s) for _ in range(args.repeats)]
            # Walls of 0.1 s are noisy: keep the run whose full-agent ratio is the median.
            runs.sort(key=lambda r: r["full_agent"]["efficiency_over_bare_loop"])  # type: ignore[index]
            results[name][str(concurrency)] = runs[len(runs) // 2]
            print(
                f"{name}, concurrency {concurrency}, {episodes} episodes: full agent / bare loop "
                + ", ".join(f"{r['full_agent']['efficiency_over_bare_loop']:.2f}" for r in runs),  # type: ignore[index]
                file=sys.stderr,
            )
    result = {
        "benchmark": "engine_concurrency",
        "episodes": args.episodes,
        "waves": args.waves,
        "max_steps": args.max_steps,
        "latency_ms": args.latency_ms,
        "repeats": args.repeats,
        "by_workload": results,
    }
    headline: dict[str, float | str] = {}
    for name, by_concurrency in results.items():
        label = name.replace("_", " ")
        for c, r in by_concurrency.items():
            bare, full = r["bare_loop"], r["full_agent"]  # type: ignore[index]
            headline[f"{label}, C = {c}: fraction of ideal, bare loop / full agent"] = (
                f"{bare['efficiency_vs_fifo_ideal']:.2f} / {full['efficiency_vs_fifo_ideal']:.2f}"
            )
            headline[f"{label}, C = {c}: full agent / bare loop"] = round(
                full["efficiency_over_bare_loop"], 2
            )
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
