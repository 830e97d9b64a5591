"""Rollout-engine overhead per env step as instruction counts, which machine load does not move.

``bench_engine_overhead.py`` times the engine against a bare asyncio loop; on a shared machine its wall
and CPU times swing with the load (the same run reads 24 or 70 µs per bare step). This benchmark runs
the same sides (the same GuessNumber episodes, scripted client and byte tokenizer: see
``_guess_number.py``), the engine both with the minimal test agent (``engine``) and with the agent
users run, ``ludic_agents.Agent`` with its full dialog, a chat template and a parser (``full``), each
in its own process under valgrind's ``cachegrind`` tool without cache
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

``--attribute`` says where the engine's extra work goes: it counts the engine and full sides again with one
part of its per-call work replaced by a constant each time (``seeds``: each call's seed; ``ids``: the
step and turn ids; ``call_timeouts``: each model call's timeout block), and reports the instructions
per env step each part costs. The stand-ins exist only in the measured child process, and no episode
takes another course with them (the scripted replies do not depend on the seed, only the values of the
pseudo-logprobs do; nothing reads the ids; no call comes near its timeout): every run still takes the
same env steps, which the benchmark checks. What each costs is what the library promises: seeds stable
across releases, uuid4 ids, a bound on every call.

Prints one JSON object (``{"skipped": ...}`` without valgrind): instructions per env step of each side
and their ratios to the bare loop (and with ``--simulate`` the same for each simulated event).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _guess_number import bare_episode, make_client, make_engine, make_full_engine, requests
from _machine import emit, machine_facts

from ludic_core import RolloutSettings
from ludic_core.credit import MonteCarloReturn

SIDES = ("none", "bare", "engine", "engine_batch", "full", "full_batch")


def _constant_seeds() -> None:
    import ludic_agents.agent
    from ludic_core.protocols.timeline import AgentTimeline

    AgentTimeline.call_seed = lambda self, sampling_seed, attempt, round_: 0  # type: ignore[method-assign]
    ludic_agents.agent.derive_seed = lambda base, *parts: 0  # type: ignore[assignment]


def _constant_ids() -> None:
    import ludic_core.protocols.timeline
    import ludic_core.types

    for module in (ludic_core.types, ludic_core.protocols.timeline):
        module.new_id = lambda: "0" * 32  # type: ignore[attr-defined]


def _no_call_timeouts() -> None:
    import ludic_agents.agent
    import ludic_core.testing.scripted_agent

    def no_timeout(seconds: float | None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    ludic_core.testing.scripted_agent.call_timeout = no_timeout  # type: ignore[assignment]
    ludic_agents.agent.call_timeout = no_timeout  # type: ignore[assignment]


# --attribute: a part of the engine's per-call work, and what replaces it by a constant.
STAND_INS = {"seeds": _constant_seeds, "ids": _constant_ids, "call_timeouts": _no_call_timeouts}


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
    if side == "full":
        result = await make_full_engine().generate_rollouts(batch, settings)
        return sum(len(r.env_steps) for r in result.rollouts)
    if side == "full_batch":
        saw = await make_full_engine().generate_batch(batch, settings, credit_assigner=MonteCarloReturn())
        return sum(1 for item in saw.items if item.meta["step_kind"] == "env")
    return 0


# The events cachegrind's summary reports, by the label it prints them under.
INSTRUCTIONS = "I refs"
SIMULATED = {"I1 misses": "i1_misses", "D1 misses": "d1_misses", "Mispredicts": "branch_mispredicts"}


def count(side: str, args: argparse.Namespace, without: str | None = None) -> tuple[dict[str, int], int]:
    """``({event: count}, env steps)`` of one side in a fresh process under cachegrind (with the part
    ``without`` names replaced by its stand-in)."""
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
        *([f"--without={without}"] if without is not None else []),
    ]
    # One hash seed for every child: str hashes, and so dict and set layouts and the instructions spent
    # probing them, vary with it; with a random seed per process two runs of one side differ by ~1k
    # instructions per env step.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False, env=env)
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
    parser.add_argument(
        "--attribute",
        action="store_true",
        help=f"also count the engine without each of {', '.join(STAND_INS)}: what each costs per env step",
    )
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # the child processes
    parser.add_argument("--without", choices=STAND_INS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side is not None:
        if args.without is not None:
            STAND_INS[args.without]()
        print(asyncio.run(run_side(args.side, args.episodes, args.max_steps, args.concurrency)))
        return
    facts = machine_facts()
    if shutil.which("valgrind") is None:
        emit(
            {"benchmark": "engine_instructions", "skipped": "valgrind is not installed"},
            facts=facts,
            headline=None,
        )
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
    result: dict[str, object] = {
        "benchmark": "engine_instructions",
        "episodes": args.episodes,
        "max_steps": args.max_steps,
        "concurrency": args.concurrency,
        "env_steps": steps,
        "instructions_per_env_step": instructions,
        "ratio_engine_vs_bare": instructions["engine"] / instructions["bare"],
        "ratio_engine_batch_vs_bare": instructions["engine_batch"] / instructions["bare"],
        "ratio_full_vs_bare": instructions["full"] / instructions["bare"],
        "ratio_full_batch_vs_bare": instructions["full_batch"] / instructions["bare"],
    }
    if args.attribute:
        for side in ("engine", "full"):
            side_events = counts[side][0][INSTRUCTIONS]
            extra = instructions[side] - instructions["bare"]
            costs: dict[str, float] = {}
            for part in STAND_INS:
                part_events, part_steps = count(side, args, without=part)
                if part_steps != steps:
                    raise SystemExit(
                        f"{side} without {part} took {part_steps} env steps, the bare loop {steps}"
                    )
                costs[part] = (side_events - part_events[INSTRUCTIONS]) / steps
            suffix = "" if side == "engine" else f"_{side}"
            result[f"instructions_per_env_step_by_part{suffix}"] = costs
            result[f"share_of_{side}_extra_by_part"] = {part: cost / extra for part, cost in costs.items()}
    if args.simulate:
        for label, name in SIMULATED.items():
            events = per_step(label)
            result[f"{name}_per_env_step"] = events
            result[f"{name}_ratio_engine_vs_bare"] = events["engine"] / events["bare"]
            result[f"{name}_ratio_full_vs_bare"] = events["full"] / events["bare"]
    headline = {
        "instructions per env step, engine": round(instructions["engine"]),
        "instructions per env step, bare loop": round(instructions["bare"]),
        "instructions, engine / bare loop": round(instructions["engine"] / instructions["bare"], 2),
        "instructions, engine batch / bare loop": round(
            instructions["engine_batch"] / instructions["bare"], 2
        ),
        "instructions per env step, full agent": round(instructions["full"]),
        "instructions, full agent / bare loop": round(instructions["full"] / instructions["bare"], 2),
        "instructions, full agent batch / bare loop": round(
            instructions["full_batch"] / instructions["bare"], 2
        ),
    }
    emit(result, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
