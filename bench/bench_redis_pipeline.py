"""Redis pipeline throughput against raw Redis RPUSH/BLPOP of the same bytes, in the same run.

Both sides move the same number of messages through a private ``redis-server`` (started here on a free
loopback port) with one producer task and one consumer task running concurrently on one event loop, so
every encode, decode and round trip of both ends is paid on one core, as in a one-process test:

* ``pipeline`` — the library path: ``RedisPipelineActor.push`` (check and encode a ``BatchMessage`` of
  SAW items with the binary wire format, RPUSH) and ``RedisBatchSource.next_batch`` (claim whole
  messages into the learner's processing list: one pipelined BLMOVE + LMOVEs + LLEN round trip per
  claim, decode and check every item, batch meta), with a learner batch of ``--learner-items`` items
  (default: one actor batch);
* ``pipeline_read`` — the same, and the consumer also reads every item's ``input_ids``,
  ``action_mask`` and ``actor_logps`` as tuples (what a collate that reads the fields pays: decoded
  items unpack their arrays on first read);
* ``raw`` — ``redis.asyncio`` with pre-made byte blobs exactly as long as the encoded messages (no
  encoding, no decoding), with the same batching: one RPUSH per message, and per learner batch one
  BLPOP (plus, when a learner batch spans several messages, an LPOP of the rest in the same round trip).

The ratios ``raw time / pipeline time`` are what the wire format, the checks and the exactly-once
claims cost on top of Redis itself. Each repeat runs the three sides back to back (in a rotating
order), and a ratio is taken within each repeat; the JSON gives the median, the range and the ratio of
the best times. It also reports the encoded size per token and the in-process encode, decode and read
time per message. Prints one JSON object (``{"skipped": ...}`` when there is no redis-server binary).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
import time
from typing import Any

from ludic_core import RolloutBatchSource, RolloutSettings
from ludic_core.credit import ConstantCredit
from ludic_core.engine import RolloutEngine
from ludic_core.pipeline import (
    WIRE_VERSION,
    BatchMessage,
    RedisBatchSource,
    RedisPipelineActor,
    decode_message,
    encode_message,
)
from ludic_core.pipeline.local_server import RedisServerNotFound, local_redis_server
from ludic_core.saw import SAWItem


def synthetic_message(index: int, *, items: int, tokens: int, seed: int) -> BatchMessage:
    """A batch like an agentic GRPO batch: ``items`` turns of ``tokens`` tokens (40% actions, with
    behaviour logprobs) and the per-item meta the SAW builder writes."""
    rng = random.Random(seed * 1_000_003 + index)
    out = []
    for i in range(items):
        n_action = max(1, int(tokens * 0.4))
        n_prompt = tokens - n_action
        out.append(
            SAWItem(
                input_ids=[rng.randrange(3, 150_000) for _ in range(tokens)],
                action_mask=[0] * n_prompt + [1] * n_action,
                weight=rng.gauss(0.0, 1.0),
                actor_logps=[math.log(rng.uniform(0.01, 1.0)) for _ in range(n_action)],
                meta={
                    "rollout_id": f"r{index}-{i // 2}",
                    "group_id": f"g{index}",
                    "turn_index": i % 2,
                    "step_index": 2 * (i % 2) + 1,
                    "policy_version": 3,
                    "reward": rng.choice([0.0, 1.0]),
                    "total_reward": rng.choice([0.0, 1.0]),
                    "completion_length": n_action,
                    "prompt_length": n_prompt,
                    "finish_reason": "stop",
                    "terminated": i % 2 == 1,
                    "truncated": False,
                    "step_info": {"correct": bool(i % 3)},
                },
            )
        )
    return BatchMessage(items=tuple(out), actor_id="bench", batch_index=index, created_at=time.time())


def read_arrays(items: list[SAWItem]) -> int:
    """Read every array a trainer collates, as tuples; returns the number of tokens read."""
    tokens = 0
    for item in items:
        tokens += len(item.input_ids) + len(item.action_mask)
        if item.actor_logps is not None:
            tokens += len(item.actor_logps)
    return tokens


async def run_pipeline(
    url: str, queue: str, messages: list[BatchMessage], learner_items: int, *, read: bool
) -> float:
    never_used = RolloutBatchSource(  # the bench pushes ready-made batches; nothing is generated
        engine=RolloutEngine(),
        requests=lambda step: [],
        credit_assigner=ConstantCredit(),
        settings=RolloutSettings(max_steps=1),
    )
    actor = RedisPipelineActor(never_used, redis_url=url, queue_key=queue, max_queue_len=None)
    per_message = len(messages[0].items)
    source = RedisBatchSource(url, queue_key=queue, min_items=learner_items, wait_timeout_s=60)
    await actor.connect()
    await source.connect()

    async def produce() -> None:
        for message in messages:
            await actor.push(message)

    async def consume() -> int:
        got = 0
        while got < len(messages) * per_message:
            # The last batch may be short of learner_items: ask only for what is left.
            source.min_items = min(learner_items, len(messages) * per_message - got)
            batch = await source.next_batch()
            if read:
                read_arrays(batch.items)
            got += len(batch.items)
        return got

    started = time.perf_counter()
    _, received = await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - started
    assert received == len(messages) * per_message, received
    await actor.aclose()
    await source.aclose()
    return elapsed


async def run_raw(url: str, queue: str, blobs: list[bytes], per_pop: int) -> float:
    import redis.asyncio as redis_asyncio

    producer = redis_asyncio.Redis.from_url(url)
    consumer = redis_asyncio.Redis.from_url(url)

    async def produce() -> None:
        for blob in blobs:
            await producer.rpush(queue, blob)

    async def pop(count: int) -> int:
        if count == 1:
            popped = await consumer.blpop([queue], timeout=5)
            rest: list[bytes] | None = []
        else:  # the learner's batching: wait for one, take the rest in the same round trip
            pipe = consumer.pipeline(transaction=False)
            pipe.blpop([queue], timeout=5)
            pipe.lpop(queue, count - 1)
            popped, rest = await pipe.execute()
        if popped is None:
            raise TimeoutError("raw consumer: nothing to pop for 5 s")
        return 1 + len(rest or [])

    async def consume() -> int:
        got = 0
        while got < len(blobs):
            got += await pop(min(per_pop, len(blobs) - got))
        return got

    started = time.perf_counter()
    await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - started
    await producer.aclose()
    await consumer.aclose()
    return elapsed


def codec_times(messages: list[BatchMessage], payloads: list[bytes]) -> dict[str, float]:
    """In-process ms per message: encode, decode (checks included), and reading the decoded arrays."""
    started = time.perf_counter()
    for message in messages:
        encode_message(message)
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    decoded = [decode_message(payload) for payload in payloads]
    decode_s = time.perf_counter() - started
    started = time.perf_counter()
    for message in decoded:
        read_arrays(list(message.items))
    read_s = time.perf_counter() - started
    return {
        "encode_ms_per_message": encode_s / len(messages) * 1e3,
        "decode_ms_per_message": decode_s / len(payloads) * 1e3,
        "read_ms_per_message": read_s / len(payloads) * 1e3,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    messages = [
        synthetic_message(i, items=args.items_per_message, tokens=args.tokens, seed=args.seed)
        for i in range(args.messages)
    ]
    payloads = [encode_message(m) for m in messages]
    learner_items = args.learner_items or args.items_per_message
    per_pop = math.ceil(learner_items / args.items_per_message)  # messages per learner batch
    rng = random.Random(args.seed)
    blobs = [rng.randbytes(len(p)) for p in payloads]
    sides = ("pipeline", "pipeline_read", "raw")
    times: dict[str, list[float]] = {side: [] for side in sides}
    for repeat in range(args.repeats):
        # Rotate the order so that no side always runs on a warmer (or a more loaded) machine.
        for side in sides[repeat % 3 :] + sides[: repeat % 3]:
            queue = f"bench:{side}:{repeat}"
            if side == "raw":
                times[side].append(await run_raw(url, queue, blobs, per_pop))
            else:
                times[side].append(
                    await run_pipeline(url, queue, messages, learner_items, read=side == "pipeline_read")
                )
    items = args.messages * args.items_per_message
    best = {side: min(values) for side, values in times.items()}
    message_bytes = statistics.fmean(len(p) for p in payloads)
    result: dict[str, Any] = {
        "benchmark": "redis_pipeline",
        "wire_version": WIRE_VERSION,
        "messages": args.messages,
        "items_per_message": args.items_per_message,
        "tokens_per_item": args.tokens,
        "learner_items": learner_items,
        "messages_per_learner_batch": per_pop,
        "message_bytes_mean": message_bytes,
        "bytes_per_token": message_bytes / (args.items_per_message * args.tokens),
        "repeats": args.repeats,
    }
    for side in ("pipeline", "pipeline_read"):
        ratios = [raw / own for raw, own in zip(times["raw"], times[side], strict=True)]
        result[f"{side}_vs_raw_throughput"] = spread(ratios)
        result[f"{side}_vs_raw_throughput_best"] = best["raw"] / best[side]
    for side in sides:
        result[f"{side}_items_per_s"] = items / best[side]
        result[f"{side}_mb_per_s"] = sum(len(p) for p in payloads) / best[side] / 1e6
        result[f"{side}_ms_per_message"] = best[side] / args.messages * 1e3
    result.update(codec_times(messages, payloads))
    result.update({f"{side}_s_all": values for side, values in times.items()})
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100, help="actor batches moved per measurement")
    p.add_argument("--items-per-message", type=int, default=16)
    p.add_argument("--tokens", type=int, default=1024, help="tokens per SAW item")
    p.add_argument(
        "--learner-items",
        type=int,
        default=None,
        help="the learner's min_items (default: --items-per-message, one actor batch per learner batch)",
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        with local_redis_server() as url:
            result = asyncio.run(measure(args, url))
    except RedisServerNotFound as exc:
        result = {"benchmark": "redis_pipeline", "skipped": str(exc)}
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
