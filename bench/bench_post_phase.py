"""GRPO post phase, Ludic against the original Ludic: credit, SAW items and batch meta on the same rollouts
(the original is a checkout of ``hallerite/ludic`` as of 9 January 2026, named by ``--original-src`` or
``LUDIC_ORIGINAL_SRC``).

The *post phase* is what a GRPO step runs once its rollouts have finished: credit assignment (group-
normalised returns), one State-Action-Weight (SAW) item per agent turn, and the batch's metadata. This
benchmark times it on both libraries, in one process, on the same rollouts:

* ``ludic``: :func:`ludic_core.engine.rollouts_to_batch` with the ``grpo`` preset's credit assigner,
  which is what ``RolloutEngine.generate_batch`` (and so ``RolloutBatchSource``) runs after
  ``generate_rollouts``: trainable-rollout selection, credit, the items of every rollout with their
  credit stamp, the (absent) sample filter, and the batch meta.
* ``original``: the original Ludic (``hallerite/ludic`` as of 9 January 2026), the sequence its
  ``RolloutEngine.generate_batch`` runs after ``generate_rollouts``: ``GroupNormalizedReturn.compute``
  (``normalize_adv=True``, as its ``make_grpo`` builds it), ``_collect_turns`` and
  ``_build_turn_saw_item`` for every rollout, then its batch meta. Its own module-level helpers are
  called; nothing of it is reimplemented.

Neither library collates items into tensors in this phase: both leave it to the trainer. Ludic's items
keep their token arrays packed until a collator reads them, where the original's hold Python lists (and
an attention mask), so part of Ludic's work moves into collation. Two more sides therefore add each
trainer's collation into micro-batches of tensors (``*_with_collation``): the original's
``split_items_by_token_budget`` and ``collate_saw_items`` per chunk, as its trainer runs them, and
``ludic_train.microbatch.collate_micro_batches`` with the trainer's default prompt grouping (skipped
without ludic-train), both with the same ``--micro-token-budget`` and ``--max-seq-len``, on one torch
thread.

The rollouts are GuessNumber episodes played once by Ludic's engine with ``ludic_agents.Agent`` (full
dialog, byte tokens, RL returns: chosen-token logprobs), requests expanded by ``GRPORequestStrategy``
(the members of a group share an env seed and a group id). The scripted model plays the usual replies
from an offset its sampling seed picks, so the members of a group guess differently and their rewards,
hence their GRPO weights, differ. Each rollout is then converted into the original's types (same token
ids, logprobs, rewards, rollout, step and turn ids, group ids; the meta and step info its engine and
protocol would have recorded). Before timing, both sides must produce the same number of items with the
same input ids, action masks, actor logprobs and weights (the original computes its advantages in
float32, so weights match to 1e-5); the script exits non-zero otherwise.

Timing: ``--repeats`` interleaved runs of each side (the order alternates between repeats), each from a
collected heap (``gc.collect()`` before it); the median wall and process CPU time per rollout of each
side, and their ratio ``ludic / original`` (below 1: Ludic is faster). A cProfile run of each side
gives its top functions by self time (``ludic_profile``, ``original_profile``).

The original: a checkout of ``hallerite/ludic`` as it stood on 9 January 2026 (the version whose
``RolloutEngine`` lives in ``ludic.training.batching``); pass its ``src`` directory (the one holding
``ludic/``) as ``--original-src`` or in ``LUDIC_ORIGINAL_SRC``. Without it the script prints a skipped result. The
original needs ``torch``, ``openai``, ``jaxtyping`` and ``beartype`` installed; it also imports
``vllm``, which this script replaces by empty stub modules (an import hook on ``vllm`` and
``vllm.*``), since the post phase never uses vLLM.

    HF_HUB_OFFLINE=1 python bench/bench_post_phase.py --original-src ../ludic-original/src
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import importlib.abc
import importlib.machinery
import os
import pstats
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _cpu_timer import CPUTimer
from _guess_number import REPLIES, TOKENIZER, make_full_engine, requests
from _machine import emit, machine_facts

from ludic_core import RolloutSettings
from ludic_core.algorithms import presets
from ludic_core.credit import CreditAssigner
from ludic_core.engine import RolloutResult, rollouts_to_batch
from ludic_core.inference import TokenCompletionRequest
from ludic_core.saw import SAWBatch
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.types import AgentStep, EnvironmentStep, Rollout

BENCHMARK = "post_phase"
_CUE = bytes(TOKENIZER.encode("<|assistant|>"))
WEIGHT_TOLERANCE = 1e-5


# -- the original library ------------------------------------------------------------------------------


class _VLLMStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for ``vllm`` and ``vllm.*``: the original imports vLLM at module level (its
    inference client), but its post phase never calls it. Any attribute read off a stub is a fresh
    empty class, enough for the annotations and base classes the import evaluates."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "vllm" or fullname.startswith("vllm."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def attribute(name: str) -> type:
            if name.startswith("__"):  # dunders (__file__, __spec__ …) stay missing, as import expects
                raise AttributeError(name)
            return type(name, (), {})

        module.__getattr__ = attribute  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def original_source(arg: str | None) -> tuple[Path | None, str]:
    """The original's ``src`` directory, or None and why not."""
    where = arg or os.environ.get("LUDIC_ORIGINAL_SRC")
    if not where:
        return None, "no original Ludic source: pass --original-src DIR or set LUDIC_ORIGINAL_SRC"
    src = Path(where)
    if not (src / "ludic").is_dir():
        return None, f"{src} has no ludic/ package (pass the src directory of a checkout of the original)"
    return src, ""


def load_original(src: Path) -> types.SimpleNamespace:
    """The original's modules the post phase uses, imported from ``src`` with vLLM stubbed."""
    sys.meta_path.insert(0, _VLLMStub())
    sys.path.insert(0, str(src))
    return types.SimpleNamespace(
        engine=importlib.import_module("ludic.training.batching.rollout_engine"),
        credit=importlib.import_module("ludic.training.credit_assignment"),
        types=importlib.import_module("ludic.types"),
        training_types=importlib.import_module("ludic.training.types"),
        micro_batching=importlib.import_module("ludic.training.batching.micro_batching"),
    )


# -- the rollouts ---------------------------------------------------------------------------------------


def _reply(request: TokenCompletionRequest, _call_index: int) -> str:
    """REPLIES in order within each episode (keyed on the turn, as in ``_guess_number.reply``), from an
    offset the sampling seed picks: the members of a GRPO group share the env's secret but not their
    seed, so some guess it sooner than others and the group's advantages are not all 0."""
    turn = bytes(request.prompt_token_ids).count(_CUE) - 1
    return REPLIES[(turn + (request.seed or 0)) % len(REPLIES)]


def make_rollouts(groups: int, group_size: int, max_steps: int) -> RolloutResult:
    """``groups × group_size`` GuessNumber episodes played by the full agent."""
    engine = make_full_engine(replies=_reply)
    expanded = GRPORequestStrategy(group_size=group_size).expand(requests(groups))
    result = asyncio.run(engine.generate_rollouts(expanded, RolloutSettings(max_steps=max_steps)))
    if result.failed_episodes:
        raise SystemExit(f"{len(result.failed_episodes)} episodes failed: {result.failure_summary()[0]}")
    return result


def _original_trace(original: types.SimpleNamespace, step: AgentStep | EnvironmentStep) -> Any:
    trace = step.trace
    logps = trace.completion_logprobs
    return original.types.TokenTrace(
        prompt_token_ids=list(trace.prompt_token_ids),
        completion_token_ids=list(trace.completion_token_ids),
        completion_logprobs=None if logps is None else list(logps),
        finish_reason=trace.finish_reason,
    )


def _original_meta(rollout: Rollout) -> dict[str, Any]:
    """What the original's single-agent protocol and engine record in a rollout's meta."""
    meta = rollout.meta
    engine = meta["engine"]
    request_meta = dict(meta["request_meta"])
    return {
        "agent_name": "unknown",
        "env_name": meta["env_name"],
        "episode_truncated": meta["episode_truncated"],
        "truncation_reason": meta["truncation_reason"],
        "episode_idx": meta["episode_index"],
        **request_meta,
        "request_meta": request_meta,
        "engine": {
            "max_steps": engine["max_steps"],
            "timeout_s": engine["timeout_s"],
            "env_kind": engine["env_kind"],
            "protocol_kind": engine["protocol_kind"],
            "env_seed": engine["env_seed"],
            "sampling_seed": engine["sampling_seed"],
            "forced_env_seed": engine["env_seed_source"] == "request",
            "forced_sampling_seed": engine["sampling_seed_source"] == "request",
            "return_spec": {"return_token_ids": True, **engine["return_spec"]},
        },
    }


def to_original(original: types.SimpleNamespace, rollout: Rollout) -> Any:
    """``rollout`` in the original's types: the same ids, tokens, logprobs, rewards and flags; the step
    info its protocol records (the client's info plus its own keys)."""
    steps: list[Any] = []
    traces: dict[str, Any] = {}  # an env step shares its turn's last call's trace, as in the original
    for step in rollout.steps:
        if isinstance(step, AgentStep):
            trace = traces[step.turn_id] = _original_trace(original, step)
            steps.append(
                original.types.AgentStep(
                    index=step.index,
                    prompt_messages=[dict(m) for m in step.prompt_messages],
                    action=step.action,
                    action_target=step.action_target,
                    loop_index=step.loop_index,
                    reward=step.reward,
                    reward_components=dict(step.reward_components),
                    truncated=step.truncated,
                    terminated=step.terminated,
                    info={**step.info, "parse_error": step.parse_error, "action_target": step.action_target},
                    trace=trace,
                    id=step.id,
                    ts_ns=step.ts_ns,
                    turn_id=step.turn_id,
                )
            )
        else:
            steps.append(
                original.types.EnvironmentStep(
                    index=step.index,
                    prev_obs=step.prev_obs,
                    action=step.action,
                    parsed_action=step.parsed_action,
                    next_obs=step.next_obs,
                    source_agent_step_id=step.source_agent_step_id,
                    agent_step_ids=list(step.agent_step_ids),
                    reward=step.reward,
                    reward_components=dict(step.reward_components),
                    truncated=step.truncated,
                    terminated=step.terminated,
                    info={
                        **step.info,
                        "source_agent_step_id": step.source_agent_step_id,
                        "agent_step_ids": list(step.agent_step_ids),
                    },
                    trace=traces.get(step.turn_id) or _original_trace(original, step),
                    id=step.id,
                    ts_ns=step.ts_ns,
                    turn_id=step.turn_id,
                )
            )
    return original.types.Rollout(id=rollout.id, steps=steps, meta=_original_meta(rollout))


# -- the two post phases --------------------------------------------------------------------------------


def ludic_post_phase(result: RolloutResult, credit_assigner: CreditAssigner) -> SAWBatch:
    """What ``RolloutEngine.generate_batch`` runs once ``generate_rollouts`` has returned."""
    return rollouts_to_batch(result, credit_assigner=credit_assigner)


def original_post_phase(original: types.SimpleNamespace, rollouts: list[Any], credit_assigner: Any) -> Any:
    """The original ``RolloutEngine.generate_batch`` after its ``generate_rollouts`` call, with no
    sample filter: the same statements, calling its own module-level helpers."""
    engine = original.engine
    weights = credit_assigner.compute(rollouts)
    items_with_lengths: list[tuple[Any, int, int]] = []
    for r in rollouts:
        require_chosen_logprobs = bool(
            (r.meta.get("engine") or {}).get("return_spec", {}).get("return_chosen_logprobs", False)
        )
        for turn in engine._collect_turns(r):
            item, prompt_len, comp_len = engine._build_turn_saw_item(
                rollout=r, turn=turn, weights=weights, require_chosen_logprobs=require_chosen_logprobs
            )
            items_with_lengths.append((item, prompt_len, comp_len))
    num_before_filter = len(items_with_lengths)
    num_after_filter = len(items_with_lengths)
    items = [item for (item, _p, _c) in items_with_lengths]
    prompt_lengths = [p for (_i, p, _c) in items_with_lengths]
    completion_lengths = [c for (_i, _p, c) in items_with_lengths]
    meta = {
        "target_rollouts": len(rollouts),
        "num_samples_before_filter": num_before_filter,
        "num_samples": num_after_filter,
        "num_samples_filtered": num_before_filter - num_after_filter,
        "avg_total_reward": (
            float(sum(r.total_reward for r in rollouts) / len(rollouts)) if rollouts else 0.0
        ),
        "avg_completion_length": (
            float(sum(completion_lengths) / len(completion_lengths)) if completion_lengths else 0.0
        ),
        "avg_prompt_length": float(sum(prompt_lengths) / len(prompt_lengths)) if prompt_lengths else 0.0,
    }
    return original.training_types.SAWBatch(items=items, meta=meta)


def ludic_collation(budget: int, max_seq_len: int) -> Callable[[SAWBatch], object] | None:
    """Ludic's trainer collation (its default prompt grouping), or None without ludic-train."""
    try:
        import torch

        from ludic_train.microbatch import collate_micro_batches
    except ImportError:
        return None
    torch.set_num_threads(1)

    def collate(batch: SAWBatch) -> object:
        return collate_micro_batches(
            batch.items,
            pad_token_id=0,
            micro_token_budget=budget,
            max_seq_len=max_seq_len,
            group_prompts=True,
        )

    return collate


def original_collation(
    original: types.SimpleNamespace, budget: int, max_seq_len: int
) -> Callable[[Any], object]:
    """What the original trainer runs on a batch: split by token budget, then collate each chunk."""
    import torch

    micro = original.micro_batching
    device = torch.device("cpu")

    def collate(batch: Any) -> object:
        chunks = micro.split_items_by_token_budget(
            batch.items, micro_token_budget=budget, max_seq_len=max_seq_len
        )
        return [micro.collate_saw_items(chunk, pad_token_id=0, device=device) for chunk in chunks]

    return collate


def check_same(ours: SAWBatch, theirs: Any) -> dict[str, Any]:
    """Both batches' items agree (count, order, ids, masks, logprobs, weights); exits 1 otherwise."""
    problems: list[str] = []
    if len(ours.items) != len(theirs.items):
        problems.append(f"{len(ours.items)} items against the original's {len(theirs.items)}")
    max_weight_diff = 0.0
    for n, (a, b) in enumerate(zip(ours.items, theirs.items, strict=False)):
        logps = b.attachments.actor_logps
        if list(a.input_ids) != b.input_ids:
            problems.append(f"item {n}: input ids differ")
        if list(a.action_mask) != b.action_mask:
            problems.append(f"item {n}: action masks differ")
        if (a.actor_logps is None) != (logps is None) or (
            logps is not None and list(a.actor_logps or ()) != logps.token_logps
        ):
            problems.append(f"item {n}: actor logprobs differ")
        diff = abs(a.weight - b.weight)
        max_weight_diff = max(max_weight_diff, diff)
        if diff > WEIGHT_TOLERANCE * max(1.0, abs(b.weight)):
            problems.append(f"item {n}: weight {a.weight!r} against the original's {b.weight!r}")
    if problems:
        print("the two post phases disagree:\n  " + "\n  ".join(problems[:20]), file=sys.stderr)
        raise SystemExit(1)
    weights = [item.weight for item in ours.items]
    return {
        "items": len(ours.items),
        "tokens": sum(len(item.input_ids) for item in ours.items),
        "nonzero_weights": sum(1 for w in weights if w != 0.0),
        "max_weight_abs_diff": max_weight_diff,
    }


# -- timing ---------------------------------------------------------------------------------------------


def time_once(run: Callable[[], object]) -> tuple[float, float, float]:
    """Wall, process CPU and garbage-collector CPU seconds of one run, from a collected heap. The
    batch it builds is freed after the clocks stop, so neither side pays for the other's."""
    with CPUTimer() as cpu:
        started = time.perf_counter()
        batch = run()
        wall = time.perf_counter() - started
    del batch
    return wall, cpu.seconds, cpu.gc_seconds


def profile_top(run: Callable[[], object], top: int) -> list[dict[str, Any]]:
    """The ``top`` functions of one run by self time (cProfile)."""
    profiler = cProfile.Profile()
    profiler.runcall(run)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return [
        {
            "function": f"{Path(filename).name}:{line} {name}",
            "calls": calls,
            "self_ms": round(tottime * 1e3, 3),
            "cumulative_ms": round(cumtime * 1e3, 3),
        }
        for (filename, line, name), (_prim, calls, tottime, cumtime, _callers) in rows
    ]


def summarise(runs: list[tuple[float, float, float]], rollouts: int) -> dict[str, Any]:
    walls, cpus, gcs = zip(*runs, strict=True)
    return {
        "wall_us_per_rollout": statistics.median(walls) / rollouts * 1e6,
        "cpu_us_per_rollout": statistics.median(cpus) / rollouts * 1e6,
        "gc_cpu_share": sum(gcs) / sum(cpus) if sum(cpus) else 0.0,
        "cpu_us_per_rollout_runs": [round(c / rollouts * 1e6, 2) for c in cpus],
    }


def time_sides(runs: dict[str, Callable[[], object]], repeats: int, rollouts: int) -> dict[str, Any]:
    """``repeats`` timed runs of every side, interleaved (the order alternates, so neither side always
    runs right after the other), summarised per rollout."""
    measured: dict[str, list[tuple[float, float, float]]] = {side: [] for side in runs}
    for repeat in range(repeats):
        order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
        for side in order:
            measured[side].append(time_once(runs[side]))
    return {side: summarise(times, rollouts) for side, times in measured.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--original-src", help="the original's src directory (default: $LUDIC_ORIGINAL_SRC)")
    parser.add_argument("--episodes", type=int, default=256, help="rollouts (a multiple of --group-size)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each side, interleaved")
    parser.add_argument("--profile-top", type=int, default=10, help="functions kept from the profile")
    parser.add_argument("--micro-token-budget", type=int, default=16384, help="collation sides' budget")
    parser.add_argument("--max-seq-len", type=int, default=4096, help="collation sides' max_seq_len")
    args = parser.parse_args()
    facts = machine_facts()
    src, why_not = original_source(args.original_src)
    if src is None:
        emit({"benchmark": BENCHMARK, "skipped": why_not}, facts=facts, headline=None)
        return
    if args.episodes % args.group_size:
        parser.error("--episodes must be a multiple of --group-size")
    try:
        original = load_original(src)
    except ImportError as error:  # torch, openai, jaxtyping or beartype missing
        emit(
            {"benchmark": BENCHMARK, "skipped": f"cannot import the original: {error}"},
            facts=facts,
            headline=None,
        )
        return

    result = make_rollouts(args.episodes // args.group_size, args.group_size, args.max_steps)
    ours_in = result.rollouts
    theirs_in = [to_original(original, r) for r in ours_in]
    ours_credit = presets.grpo(group_size=args.group_size).credit_assigner
    # The original's make_grpo builds this (group_normalize_adv=True).
    theirs_credit = original.credit.GroupNormalizedReturn(group_size=args.group_size, normalize_adv=True)

    def ours() -> SAWBatch:
        return ludic_post_phase(result, ours_credit)

    def theirs() -> Any:
        return original_post_phase(original, theirs_in, theirs_credit)

    agreement = check_same(ours(), theirs())
    print(f"{agreement['items']} items agree on both sides; timing", file=sys.stderr)
    n = len(ours_in)
    sides: dict[str, Callable[[], object]] = {"ludic": ours, "original": theirs}
    ours_collate = ludic_collation(args.micro_token_budget, args.max_seq_len)
    if ours_collate is not None:
        theirs_collate = original_collation(original, args.micro_token_budget, args.max_seq_len)
        sides["ludic_with_collation"] = lambda: ours_collate(ours())
        sides["original_with_collation"] = lambda: theirs_collate(theirs())
    summary = time_sides(sides, args.repeats, n)
    cpu_ratio = summary["ludic"]["cpu_us_per_rollout"] / summary["original"]["cpu_us_per_rollout"]
    wall_ratio = summary["ludic"]["wall_us_per_rollout"] / summary["original"]["wall_us_per_rollout"]
    print(f"ludic / original: CPU {cpu_ratio:.2f}, wall {wall_ratio:.2f}", file=sys.stderr)
    collation_ratio = (
        summary["ludic_with_collation"]["cpu_us_per_rollout"]
        / summary["original_with_collation"]["cpu_us_per_rollout"]
        if ours_collate is not None
        else None
    )
    out = {
        "benchmark": BENCHMARK,
        "original_version": "hallerite/ludic as of 2026-01-09 (vllm stubbed)",
        "rollouts": n,
        "group_size": args.group_size,
        "max_steps": args.max_steps,
        "repeats": args.repeats,
        "steps": sum(len(r.steps) for r in ours_in),
        **agreement,
        **summary,
        "ratio_cpu": cpu_ratio,
        "ratio_wall": wall_ratio,
        "ratio_cpu_with_collation": collation_ratio,
        "collation": {"micro_token_budget": args.micro_token_budget, "max_seq_len": args.max_seq_len}
        if ours_collate is not None
        else "skipped: ludic-train is not installed",
        "ludic_profile": profile_top(ours, args.profile_top),
        "original_profile": profile_top(theirs, args.profile_top),
    }
    headline = {
        "post phase per rollout, ludic (µs CPU)": round(summary["ludic"]["cpu_us_per_rollout"], 1),
        "post phase per rollout, original (µs CPU)": round(summary["original"]["cpu_us_per_rollout"], 1),
        "ludic / original (CPU)": round(cpu_ratio, 2),
        "ludic / original (wall)": round(wall_ratio, 2),
    }
    if collation_ratio is not None:
        headline["with collation into micro-batches, ludic / original (CPU)"] = round(collation_ratio, 2)
    emit(out, facts=facts, headline=headline)


if __name__ == "__main__":
    main()
