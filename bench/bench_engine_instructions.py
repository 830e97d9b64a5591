"""Rollout-engine overhead per env step as instruction counts, which machine load does not move.

``bench_engine_overhead.py`` times the engine against a bare asyncio loop; on a shared machine its wall
and CPU times swing with the load (the same run reads 24 or 70 µs per bare step). This benchmark runs
the same sides (the same GuessNumber episodes, scripted client and byte tokenizer: see
``_guess_number.py``) each in its own process under valgrind's ``cachegrind`` tool without cache
simulation, which counts the instructions the process executes; a run that only imports and builds
the requests is subtracted, so what is left is the episodes' own work, garbage collection included.

Instructions are not time: the engine's CPU-time ratio to the bare loop is higher than its
instruction ratio. ``--simulate`` shows why: cachegrind then also simulates the caches and the branch
predictor, and reports per env step the instruction-cache misses (I1), the data-cache misses (D1) and
the mispredicted branches (conditional and indirect: CPython's bytecode dispatch is an indirect
jump). Each costs several to ~20 cycles, and the engine spreads its work over many more small
functions than the bare loop, so its share of them is larger than its share of instructions. The
simulated machine is valgrind's model, not this CPU: read the ratios, not the absolute counts. Read
both this benchmark and the timed one: this one for a change's effect on the work done, the timed
one for what it costs.

Prints one JSON object (``{"skipped": ...}`` without valgrind): instructions per env step of each side
and their ratios to the bare loop (and with ``--simulate`` the same for each simulated event).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _guess_number import bare_episode, make_client, make_engine, requests

from ludic_core import RolloutSettings
from ludic_core.credit import MonteCarloReturn

SIDES = ("none", "bare", "engine", "engine_batch")


async def run_side(side: str, episodes: int, max_steps: int, concurrency: int) -> int:
    """Run one side; returns the env steps it took (0 for ``none``, the import-only run)."""
    batch = requests(episodes)
    settings = RolloutSettings(max_steps=max_steps, concurrency=concurrency)
    if side == "bare":
        client = make_client()
        return sum([await bare_episode(client, episode, max_steps) for episode in range(episodes)])
    if side == "engine":
        result = await make_engine().generate_rollouts(batch, settings)
        return sum(len(r.env_steps) for r in result.rollouts)
    if side == "engine_batch":
        saw = await make_engine().generate_batch(batch, settings, credit_assigner=MonteCarloReturn())
        return sum(1 for item in saw.items if item.meta["step_kind"] == "env")
    return 0


# The events cachegrind's summary reports, by the label it prints them under.
INSTRUCTIONS = "I refs"
SIMULATED = {"I1 misses": "i1_misses", "D1 misses": "d1_misses", "Mispredicts": "branch_mispredicts"}


def count(side: str, args: argparse.Namespace) -> tuple[dict[str, int], int]:
    """``({event: count}, env steps)`` of one side in a fresh process under cachegrind."""
    simulate = "yes" if args.simulate else "no"
    command = [
        "valgrind",
        "--tool=cachegrind",
        f"--cache-sim={simulate}",
        f"--branch-sim={simulate}",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--side",
        side,
        f"--episodes={args.episodes}",
        f"--max-steps={args.max_steps}",
        f"--concurrency={args.concurrency}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{side} failed under valgrind:\n{done.stderr[-2000:]}")
    labels = [INSTRUCTIONS, *SIMULATED] if args.simulate else [INSTRUCTIONS]
    events: dict[str, int] = {}
    for label in labels:
        # "==123== D1  misses:  26,177,852  ( 23,246,536 rd ...": the total is the first number.
        found = re.search(r"\s+".join(label.split()) + r":\s+([\d,]+)", done.stderr)
        if found is None:
            raise SystemExit(f"no {label!r} count in valgrind's output:\n{done.stderr[-2000:]}")
        events[label] = int(found.group(1).replace(",", ""))
    return events, int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="also simulate caches and branch prediction (slower): misses and mispredicts per env step",
    )
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # the child processes
    args = parser.parse_args()
    if args.side is not None:
        print(asyncio.run(run_side(args.side, args.episodes, args.max_steps, args.concurrency)))
        return
    if shutil.which("valgrind") is None:
        print(json.dumps({"benchmark": "engine_instructions", "skipped": "valgrind is not installed"}))
        return
    counts = {side: count(side, args) for side in SIDES}
    steps = counts["bare"][1]
    for side, (_, side_steps) in counts.items():
        if side != "none" and side_steps != steps:
            raise SystemExit(f"{side} took {side_steps} env steps, the bare loop {steps}")

    def per_step(label: str) -> dict[str, float]:
        floor = counts["none"][0][label]
        return {
            side: (events[label] - floor) / steps for side, (events, _) in counts.items() if side != "none"
        }

    instructions = per_step(INSTRUCTIONS)
    result = {
        "benchmark": "engine_instructions",
        "episodes": args.episodes,
        "max_steps": args.max_steps,
        "concurrency": args.concurrency,
        "env_steps": steps,
        "instructions_per_env_step": instructions,
        "ratio_engine_vs_bare": instructions["engine"] / instructions["bare"],
        "ratio_engine_batch_vs_bare": instructions["engine_batch"] / instructions["bare"],
    }
    if args.simulate:
        for label, name in SIMULATED.items():
            events = per_step(label)
            result[f"{name}_per_env_step"] = events
            result[f"{name}_ratio_engine_vs_bare"] = events["engine"] / events["bare"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
