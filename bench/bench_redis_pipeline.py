"""Redis pipeline throughput against raw Redis RPUSH/BLPOP of the same bytes, in the same run.

Both sides move the same number of messages through a private ``redis-server`` (started here on a free
loopback port) with one producer task and one consumer task running concurrently on one event loop:

* ``pipeline`` — the library path: ``RedisPipelineActor.push`` (encode a ``BatchMessage`` of SAW items
  with the binary wire format, RPUSH) and ``RedisBatchSource.next_batch`` (LPOP several messages per
  round trip, BLPOP when the queue is empty, decode and check every item, batch meta), with a learner
  batch of ``--learner-items`` items (default: one actor batch);
* ``raw`` — ``redis.asyncio`` RPUSH/BLPOP, one message per command, of pre-made byte blobs exactly as
  long as the encoded messages (no encoding, no decoding).

The ratio ``pipeline / raw`` is what the wire format and the checks cost on top of Redis itself. The
JSON also reports the encoded size per token and breaks the pipeline cost down into encode and decode
time per message, measured in-process (the rest is Redis, asyncio and the batch meta). Prints one JSON
object (``{"skipped": ...}`` when there is no redis-server binary).
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


async def run_pipeline(url: str, queue: str, messages: list[BatchMessage], learner_items: int) -> float:
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
            got += len((await source.next_batch()).items)
        return got

    started = time.perf_counter()
    _, received = await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - started
    assert received == len(messages) * per_message, received
    await actor.aclose()
    await source.aclose()
    return elapsed


async def run_raw(url: str, queue: str, blobs: list[bytes]) -> float:
    import redis.asyncio as redis_asyncio

    producer = redis_asyncio.Redis.from_url(url)
    consumer = redis_asyncio.Redis.from_url(url)

    async def produce() -> None:
        for blob in blobs:
            await producer.rpush(queue, blob)

    async def consume() -> int:
        got = 0
        while got < len(blobs):
            popped = await consumer.blpop([queue], timeout=5)
            if popped is None:
                raise TimeoutError("raw consumer: nothing to pop for 5 s")
            got += 1
        return got

    started = time.perf_counter()
    await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - started
    await producer.aclose()
    await consumer.aclose()
    return elapsed


def codec_times(messages: list[BatchMessage], payloads: list[bytes]) -> tuple[float, float]:
    started = time.perf_counter()
    for message in messages:
        encode_message(message)
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    for payload in payloads:
        decode_message(payload)
    decode_s = time.perf_counter() - started
    return encode_s / len(messages), decode_s / len(payloads)


async def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    messages = [
        synthetic_message(i, items=args.items_per_message, tokens=args.tokens, seed=args.seed)
        for i in range(args.messages)
    ]
    payloads = [encode_message(m) for m in messages]
    learner_items = args.learner_items or args.items_per_message
    rng = random.Random(args.seed)
    blobs = [rng.randbytes(len(p)) for p in payloads]
    pipeline_s: list[float] = []
    raw_s: list[float] = []
    for repeat in range(args.repeats):
        # Alternate the order so that neither side always runs on a warmer server.
        order = ("pipeline", "raw") if repeat % 2 == 0 else ("raw", "pipeline")
        for side in order:
            queue = f"bench:{side}:{repeat}"
            if side == "pipeline":
                pipeline_s.append(await run_pipeline(url, queue, messages, learner_items))
            else:
                raw_s.append(await run_raw(url, queue, blobs))
    encode_s, decode_s = codec_times(messages, payloads)
    items = args.messages * args.items_per_message
    best_pipeline, best_raw = min(pipeline_s), min(raw_s)
    message_bytes = statistics.fmean(len(p) for p in payloads)
    return {
        "benchmark": "redis_pipeline",
        "wire_version": WIRE_VERSION,
        "messages": args.messages,
        "items_per_message": args.items_per_message,
        "tokens_per_item": args.tokens,
        "learner_items": learner_items,
        "message_bytes_mean": message_bytes,
        "bytes_per_token": message_bytes / (args.items_per_message * args.tokens),
        "repeats": args.repeats,
        "pipeline_items_per_s": items / best_pipeline,
        "raw_items_per_s": items / best_raw,
        "pipeline_vs_raw_throughput": best_raw / best_pipeline,
        "pipeline_mb_per_s": sum(len(p) for p in payloads) / best_pipeline / 1e6,
        "raw_mb_per_s": sum(len(b) for b in blobs) / best_raw / 1e6,
        "pipeline_ms_per_message": best_pipeline / args.messages * 1e3,
        "raw_ms_per_message": best_raw / args.messages * 1e3,
        "encode_ms_per_message": encode_s * 1e3,
        "decode_ms_per_message": decode_s * 1e3,
        "pipeline_s_all": pipeline_s,
        "raw_s_all": raw_s,
    }


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
    p.add_argument("--repeats", type=int, default=3)
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
