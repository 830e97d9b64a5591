"""Padding efficiency of token-budget micro-batching against naive fixed-size batching.

Both sides split the same synthetic macro-batch of SAW items (log-normal total lengths, as multi-turn
agent turns have: most short, a long tail, a few past ``max_seq_len``) and collate each micro-batch with
``ludic_train.collate.collate_saw_items``:

* ``token_budget`` — ``ludic_train.microbatch.collate_micro_batches``: truncate, sort by length, pack
  greedily under ``micro_token_budget`` padded tokens;
* ``fixed_safe`` — batches of ``micro_token_budget // max_seq_len`` items in arrival order (the largest
  fixed size that can never exceed the budget);
* ``fixed_same_passes`` — fixed-size batches in arrival order with as many forward passes as the
  token-budget split (it may exceed the budget: ``max_padded_tokens`` says by how much).

Padding efficiency = real tokens / padded tokens processed. Prints one JSON object with each side's
efficiency, forward passes and largest pass, and the ratios against ``fixed_safe``; numbers are means
over ``--seeds`` macro-batches.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence

from _machine import emit, machine_facts

from ludic_core.saw import SAWItem
from ludic_train.collate import collate_saw_items
from ludic_train.microbatch import collate_micro_batches, truncate_item


def synthetic_items(n: int, *, seed: int, median: float, sigma: float, max_len: int) -> list[SAWItem]:
    """Items whose total length is log-normal (clipped to [8, max_len]); the last ~40% are actions."""
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        length = int(min(max_len, max(8.0, rng.lognormvariate(math.log(median), sigma))))
        prompt = max(1, int(length * rng.uniform(0.4, 0.8)))
        items.append(
            SAWItem(
                input_ids=[rng.randrange(1, 32000) for _ in range(length)],
                action_mask=[0] * prompt + [1] * (length - prompt),
                weight=rng.gauss(0.0, 1.0),
            )
        )
    return items


def summarize(batches: Sequence[dict], real_tokens: int) -> dict[str, float]:
    padded = [int(b["input_ids"].numel()) for b in batches]
    return {
        "padding_efficiency": real_tokens / sum(padded),
        "forward_passes": len(batches),
        "max_padded_tokens": max(padded),
    }


def fixed_size(items: Sequence[SAWItem], size: int, max_seq_len: int) -> list[dict]:
    cut = [truncate_item(item, max_seq_len) for item in items]
    return [collate_saw_items(cut[i : i + size], pad_token_id=0) for i in range(0, len(cut), size)]


def run(args: argparse.Namespace) -> dict[str, object]:
    per_seed: dict[str, list[dict[str, float]]] = {
        "token_budget": [],
        "fixed_safe": [],
        "fixed_same_passes": [],
    }
    split_seconds: list[float] = []
    for seed in range(args.seeds):
        items = synthetic_items(
            args.items, seed=seed, median=args.median_len, sigma=args.sigma, max_len=args.max_len_generated
        )
        real = sum(min(len(i), args.max_seq_len) for i in items)
        start = time.perf_counter()
        micro = collate_micro_batches(
            items, pad_token_id=0, micro_token_budget=args.micro_token_budget, max_seq_len=args.max_seq_len
        )
        split_seconds.append(time.perf_counter() - start)
        per_seed["token_budget"].append(summarize([m.tensors for m in micro], real))
        safe = max(1, args.micro_token_budget // args.max_seq_len)
        per_seed["fixed_safe"].append(summarize(fixed_size(items, safe, args.max_seq_len), real))
        same = math.ceil(len(items) / len(micro))
        per_seed["fixed_same_passes"].append(summarize(fixed_size(items, same, args.max_seq_len), real))

    def mean(side: str, key: str) -> float:
        return statistics.fmean(r[key] for r in per_seed[side])

    result: dict[str, object] = {
        "benchmark": "microbatch_padding",
        "config": {
            "items": args.items,
            "seeds": args.seeds,
            "length_distribution": f"lognormal(median={args.median_len}, sigma={args.sigma}) "
            f"clipped to [8, {args.max_len_generated}]",
            "max_seq_len": args.max_seq_len,
            "micro_token_budget": args.micro_token_budget,
            "fixed_safe_batch_size": max(1, args.micro_token_budget // args.max_seq_len),
        },
    }
    for side in per_seed:
        result[side] = {key: round(mean(side, key), 4) for key in per_seed[side][0]}
    result["token_budget"]["split_and_collate_s"] = round(statistics.fmean(split_seconds), 4)  # type: ignore[index]
    baseline = mean("fixed_safe", "padding_efficiency")
    result["efficiency_ratio_vs_fixed_safe"] = round(mean("token_budget", "padding_efficiency") / baseline, 3)
    result["efficiency_ratio_vs_fixed_same_passes"] = round(
        mean("token_budget", "padding_efficiency") / mean("fixed_same_passes", "padding_efficiency"), 3
    )
    result["forward_pass_ratio_vs_fixed_safe"] = round(
        mean("token_budget", "forward_passes") / mean("fixed_safe", "forward_passes"), 3
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=512)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--median-len", type=float, default=300.0)
    parser.add_argument("--sigma", type=float, default=0.8)
    parser.add_argument("--max-len-generated", type=int, default=1400)
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--micro-token-budget", type=int, default=8192)
    args = parser.parse_args(argv)
    facts = machine_facts()
    result = run(args)
    headline = {
        "padding efficiency, token budget": result["token_budget"]["padding_efficiency"],
        "padding efficiency, fixed safe batch size": result["fixed_safe"]["padding_efficiency"],
        "efficiency, token budget / fixed safe": result["efficiency_ratio_vs_fixed_safe"],
        "forward passes, token budget / fixed safe": result["forward_pass_ratio_vs_fixed_safe"],
    }
    emit(result, facts=facts, headline=headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
