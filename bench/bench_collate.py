"""Collation cost: ``collate_saw_items`` against a token-by-token collate of the same items, same run.

A learner collates every batch it trains on, on the host, before the forward pass. The baseline reads
each item's fields as tuples and builds padded Python lists (one Python step per token); the library
converts each array through one buffer and does the rest with tensor operations. Both produce the same tensors (checked here, and in ``tests/test_collate_microbatch.py``).

Items are built as the SAW builder builds them (packed arrays; a fresh set per repeat, since a packed
item keeps the tuples it was once read as), and as the pipeline's learner receives them (decoded from
the wire), ``--items`` per batch of ``--tokens`` tokens, 40% of them actions with logprobs. Prints one
JSON object: median milliseconds per batch of each side and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from _machine import emit, machine_facts
from bench_redis_pipeline import synthetic_message

from ludic_core.pipeline import decode_message, encode_message
from ludic_core.saw import SAWItem
from ludic_train.collate import collate_saw_items


def token_by_token(items: Sequence[SAWItem], *, pad_token_id: int) -> dict[str, torch.Tensor]:
    """The baseline: fields read as tuples, padded as Python lists, logprobs placed one by one."""
    length = max(len(item) for item in items)
    batch = {
        "input_ids": torch.tensor(
            [[*i.input_ids] + [pad_token_id] * (length - len(i)) for i in items], dtype=torch.long
        ),
        "attention_mask": torch.tensor([[1] * len(i) + [0] * (length - len(i)) for i in items]),
        "action_mask": torch.tensor(
            [[*i.action_mask] + [0] * (length - len(i)) for i in items], dtype=torch.float32
        ),
        "logit_positions": torch.tensor(
            sorted({t - 1 for i in items for t in range(1, len(i)) if i.action_mask[t]}), dtype=torch.long
        ),
    }
    rows = []
    for item in items:
        values = iter(item.actor_logps or ())
        rows.append([next(values) if m else 0.0 for m in item.action_mask] + [0.0] * (length - len(item)))
    batch["actor_logps"] = torch.tensor(rows, dtype=torch.float32)
    return batch


Collate = Callable[..., dict[str, torch.Tensor]]


def time_side(collate: Collate, batches: list[list[SAWItem]]) -> float:
    started = time.perf_counter()
    for items in batches:
        collate(items, pad_token_id=0)
    return (time.perf_counter() - started) / len(batches) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    facts = machine_facts()

    def fresh(repeat: int, *, decoded: bool) -> list[list[SAWItem]]:
        messages = [
            synthetic_message(b, items=args.items, tokens=args.tokens, seed=repeat)
            for b in range(args.batches)
        ]
        if decoded:
            messages = [decode_message(encode_message(m)) for m in messages]
        return [list(m.items) for m in messages]

    for items in fresh(0, decoded=True)[:1] + fresh(0, decoded=False)[:1]:  # the same tensors
        ours, theirs = collate_saw_items(items, pad_token_id=0), token_by_token(items, pad_token_id=0)
        assert all(torch.equal(ours[key], value) for key, value in theirs.items())

    result: dict[str, object] = {"benchmark": "collate", "items": args.items, "tokens": args.tokens}
    for source in ("built", "decoded"):
        times: dict[str, list[float]] = {"library": [], "token_by_token": []}
        for repeat in range(args.repeats):
            times["library"].append(time_side(collate_saw_items, fresh(repeat, decoded=source == "decoded")))
            times["token_by_token"].append(
                time_side(token_by_token, fresh(repeat, decoded=source == "decoded"))
            )
        medians = {side: statistics.median(values) for side, values in times.items()}
        result[source] = {
            "ms_per_batch": medians,
            "ratio_library_vs_token_by_token": medians["library"] / medians["token_by_token"],
        }
    emit(
        result,
        facts=facts,
        headline={
            f"collate, {args.items} items of {args.tokens} tokens (ms)": round(
                result["decoded"]["ms_per_batch"]["library"],
                2,  # type: ignore[index]
            ),
            "collate / token by token, built items": round(
                result["built"]["ratio_library_vs_token_by_token"],
                3,  # type: ignore[index]
            ),
            "collate / token by token, decoded items": round(
                result["decoded"]["ratio_library_vs_token_by_token"],
                3,  # type: ignore[index]
            ),
        },
    )


if __name__ == "__main__":
    main()
