"""Rollout throughput of a CPU-bound env with 1 and with N worker processes (``RolloutSettings.workers``).

Each env step of this GuessNumber variant does a fixed amount of pure-Python work (``--work``
iterations, a few milliseconds), as a code-execution or math-grading env does; the model is a scripted
client that answers at once, so the env's CPU is the whole cost. One process steps one episode at a
time whatever its concurrency; N workers step N at once. The same episodes run with ``workers=1`` and
``workers=N``, alternating, after one warm-up call on each engine (which starts the workers: a pool
stays up between calls), and the episodes of both sides are checked to be the same.

Prints one JSON object: episodes per second on each side (best of ``--repeats``), their ratio
(``speedup``; ``N`` would be perfect), the CPU milliseconds per env step measured in this process, the
time the workers took to start, and the cores each side got (its processes' CPU seconds over its wall
seconds, read from ``/proc`` on Linux). The machine's load average is recorded with it: when other
processes hold the cores, the N workers get fewer than N of them (``cores_used`` says how many) and the
speedup falls with it. So the same run also measures what the machine itself allows: the env's work
alone (``burn``, no Ludic) in one process and in N processes at once (``machine_speedup``), which
shared caches, clock boosts and other tenants keep below N; ``speedup / machine_speedup`` is the part
the workers themselves lose.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from _guess_number import INFERENCE, make_client
from _machine import machine_facts

from ludic_core import RolloutSettings
from ludic_core.engine import RolloutEngine, RolloutResult
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.serialization import rollout_to_dict
from ludic_core.testing import GuessNumberEnv, ScriptedAgent
from ludic_core.types import StepOutcome

_SPAWN = multiprocessing.get_context("spawn")


def burn(iterations: int) -> int:
    """A fixed amount of Python work (not a fixed time: a timed spin would finish on time even when
    two processes shared one core)."""
    total = 0
    for i in range(iterations):
        total = (total + i * i) % 1_000_003
    return total


class BusyGuessEnv(GuessNumberEnv):
    """GuessNumber whose every step first does ``work`` iterations of Python arithmetic."""

    def __init__(self, *, work: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.work = work

    def env_step(self, action: str) -> StepOutcome:
        burn(self.work)
        return super().env_step(action)


def protocol() -> SingleAgentProtocol:
    return SingleAgentProtocol(ScriptedAgent(make_client()))


def engine() -> RolloutEngine:
    """Module-level factories: the workers rebuild this engine from them."""
    return RolloutEngine(
        env_factories={"busy": BusyGuessEnv}, protocol_factories={"single": protocol}, deterministic_ids=True
    )


def requests(episodes: int, work: int) -> list[RolloutRequest]:
    return [
        RolloutRequest(
            EnvSpec("busy", {"work": work}),
            ProtocolSpec("single"),
            env_seed=e,
            sampling_seed=e,
            inference=INFERENCE,
        )
        for e in range(episodes)
    ]


def step_ms(work: int, repeats: int = 20) -> float:
    started = time.process_time()
    for _ in range(repeats):
        burn(work)
    return (time.process_time() - started) / repeats * 1000


def cpu_seconds(pids: list[int]) -> float | None:
    """User plus system CPU seconds of these processes so far (Linux ``/proc``), else None."""
    total = 0.0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return total


def _burn_many(iterations: int, times: int) -> None:
    for _ in range(times):
        burn(iterations)


def machine_speedup(work: int, workers: int, steps: int) -> float:
    """The speedup of ``steps`` env-step workloads spread over ``workers`` processes, without Ludic: the
    ceiling this machine puts on any multi-process rollout (best of two tries each)."""
    alone = min(_timed(lambda: _burn_many(work, steps)) for _ in range(2))
    # Process start-up is the workers' one-off cost too, but the rollout side is measured warm: take the
    # time to start and join idle processes off.
    start_up = min(_timed(lambda: _in_processes(workers, 0, 0)) for _ in range(2))
    together = min(_timed(lambda: _in_processes(workers, work, steps // workers)) for _ in range(2))
    return alone / (together - start_up)


def _in_processes(count: int, work: int, steps: int) -> None:
    """Run ``steps`` env-step workloads in each of ``count`` spawned processes at once."""
    processes = [_SPAWN.Process(target=_burn_many, args=(work, steps)) for _ in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()


def _timed(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


def signature(result: RolloutResult) -> list[Any]:
    return [
        [{k: v for k, v in step.items() if k != "ts_ns"} for step in rollout_to_dict(r)["steps"]]
        for r in result.rollouts
    ]


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    batch = requests(args.episodes, args.work)
    sides = {1: engine(), args.workers: engine()}
    settings = {w: RolloutSettings(max_steps=12, concurrency=args.concurrency, workers=w) for w in sides}
    best: dict[int, float] = {}
    cores: dict[int, float | None] = {}
    signatures: dict[int, list[Any]] = {}
    started = time.perf_counter()
    await sides[args.workers].generate_rollouts(batch[:4], settings[args.workers])  # starts the workers
    start_s = time.perf_counter() - started
    await sides[1].generate_rollouts(batch[:4], settings[1])
    steps = 0
    pids = [os.getpid(), *(child.pid for child in multiprocessing.active_children() if child.pid)]
    try:
        for _ in range(args.repeats):
            for workers, side in sides.items():
                cpu_before = cpu_seconds(pids)
                began = time.perf_counter()
                result = await side.generate_rollouts(batch, settings[workers])
                wall = time.perf_counter() - began
                cpu_after = cpu_seconds(pids)
                if result.failed_episodes:
                    sys.exit(f"workers={workers}: {len(result.failed_episodes)} episodes failed")
                if wall < best.get(workers, float("inf")):
                    best[workers] = wall
                    used = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
                    cores[workers] = None if used is None else used / wall
                signatures[workers] = signature(result)
                steps = sum(len(r.steps) for r in result.rollouts)
                print(f"workers={workers}: {wall:.2f} s", file=sys.stderr)
    finally:
        for side in sides.values():
            side.close()
    if signatures[1] != signatures[args.workers]:
        sys.exit("the episodes differ between workers=1 and workers=N")
    rate = {w: args.episodes / best[w] for w in sides}
    speedup = rate[args.workers] / rate[1]
    ceiling = machine_speedup(args.work, args.workers, steps)
    return {
        "episodes": args.episodes,
        "env_steps_per_call": steps,
        "work_iterations_per_step": args.work,
        "cpu_ms_per_env_step": step_ms(args.work),
        "concurrency": args.concurrency,
        "workers": args.workers,
        "best_wall_s": {str(w): best[w] for w in sides},
        "episodes_per_s": {str(w): rate[w] for w in sides},
        "speedup": speedup,
        "machine_speedup": ceiling,
        "speedup_over_machine_speedup": speedup / ceiling,
        "cores_used": {str(w): cores[w] for w in sides},
        "worker_start_s": start_s,
        "same_episodes": True,
        "headline": {
            "CPU per env step (ms)": round(step_ms(args.work), 2),
            "episodes/s, 1 process": round(rate[1], 1),
            f"episodes/s, {args.workers} worker processes": round(rate[args.workers], 1),
            f"speedup with {args.workers} workers": round(speedup, 2),
            f"the machine's own speedup, {args.workers} processes without Ludic": round(ceiling, 2),
            f"{args.workers} workers' start (s)": round(start_s, 1),
            "cores used, 1 process": _rounded(cores[1]),
            f"cores used, {args.workers} workers": _rounded(cores[args.workers]),
        },
    }


def _rounded(value: float | None) -> float | str:
    return "not measured" if value is None else round(value, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--work", type=int, default=30_000, help="Python iterations per env step")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    facts = machine_facts()
    result = asyncio.run(measure(args))
    print(json.dumps({"benchmark": "rollout_workers", "machine": facts, **result}))


if __name__ == "__main__":
    main()
