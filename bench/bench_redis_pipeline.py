"""Redis pipeline throughput (push, claim, decode, acknowledge) against a raw redis-py loop that sends
the same Redis commands with the same bytes, and against plain RPUSH/BLPOP, in the same run.

Every side moves the same number of messages through a private ``redis-server`` (started here on a
free loopback port) with one producer and one consumer running concurrently, in two topologies, one
after the other (``--producer`` picks one): as two tasks of one event loop (``same_loop``), so every
encode, decode and round trip of both ends is paid on one core; and with the producer in a second
process (``process``), as an actor runs beside a learner (it builds the same messages from the same
seed, and the consumer times from its go signal to the last acknowledgement). The same-loop run's
numbers are the JSON's top level, the other run's are under ``producer_process``. The sides:

* ``pipeline`` — the library path: ``RedisPipelineActor.push`` (check and encode a ``BatchMessage`` of
  SAW items with the binary wire format, RPUSH) and ``RedisBatchSource.next_batch`` (claim whole
  messages into the learner's processing list with one BLMOVE + LMOVEs + LLEN round trip, decode and
  check every item, batch meta), a learner batch of ``--learner-items`` items (default: one actor
  batch), and ``checkpoint_committed`` every ``--ack-every`` learner batches, which the next claim (or
  the closing source) acknowledges: the claimed messages move to the trained list in one transaction
  with the acknowledged count;
* ``pipeline_read`` — the same, and the consumer also collates every learner batch into the tensors
  a trainer trains on (``ludic_train.collate_saw_items``; without ludic-train installed it reads every
  item's ``input_ids``, ``action_mask`` and ``actor_logps`` as tuples, and the JSON's ``read_side``
  says which);
* ``raw_exactly_once`` — ``redis.asyncio`` as one would write the exactly-once design by hand, with
  pre-made byte blobs exactly as long as the encoded messages (no encoding, no decoding, no checks):
  one RPUSH per message, per learner batch one pipelined BLMOVE + LMOVEs + LLEN, and every
  ``--ack-every`` batches one MULTI of LMOVEs (processing → trained), LTRIM and SET of the count;
* ``raw_blpop`` — the same blobs with plain RPUSH and BLPOP (plus an LPOP of the rest in the same round
  trip when a learner batch spans several messages): Redis as a queue that loses a message whose
  learner dies.

The actor's items are built as the SAW builder builds them, through the same public constructor
(``PackedSAWItem.from_arrays`` on an ``array("I")`` of ids, the mask's runs and an ``array("d")`` of
logprobs), so ``push`` encodes them from their packed arrays, as a real actor does; the time to build
them is not measured (nor is a builder's in a real run: it is part of generating the batch).

The ratios ``raw time / pipeline time`` (wall time, and process CPU time: of producer and consumer
on one loop, of the consumer with the producer in a second process; CPU time moves less with the machine's
load) are what the wire format, its checks and the library's
bookkeeping cost on top of the same Redis commands (``pipeline_vs_raw_exactly_once``) and on top of a
queue without delivery guarantees (``pipeline_vs_raw_blpop``). Each repeat runs the sides back to back
(in a rotating order), and a ratio is taken within each repeat; the JSON gives the median, the range
and the ratio of the best times, the encoded size per token and the in-process encode, decode and read
time per message. Prints one JSON object (``{"skipped": ...}`` when there is no redis-server binary).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import random
import statistics
import time
from array import array
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import attrs
from _machine import emit, machine_facts

from ludic_core import RolloutBatchSource, RolloutSettings
from ludic_core.credit import ConstantCredit
from ludic_core.engine import RolloutEngine
from ludic_core.packed_saw import UINT32, PackedSAWItem
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

# The learner's default (RedisBatchSource.keep_trained_messages); the raw loop trims the same.
KEEP_TRAINED = 256
SIDES = ("pipeline", "pipeline_read", "raw_exactly_once", "raw_blpop")


def synthetic_message(index: int, *, items: int, tokens: int, seed: int) -> BatchMessage:
    """A batch like an agentic GRPO batch: ``items`` turns of ``tokens`` tokens (40% actions, with
    behaviour logprobs) and the per-item meta the SAW builder writes, built as the SAW builder builds
    its items: ``PackedSAWItem.from_arrays`` on an ``array("I")`` of ids, the mask's runs and an
    ``array("d")`` of logprobs."""
    rng = random.Random(seed * 1_000_003 + index)
    out = []
    for i in range(items):
        n_action = max(1, int(tokens * 0.4))
        n_prompt = tokens - n_action
        out.append(
            PackedSAWItem.from_arrays(
                input_ids=array(UINT32, [rng.randrange(3, 150_000) for _ in range(tokens)]),
                action_runs=(n_prompt, n_action),
                weight=rng.gauss(0.0, 1.0),
                actor_logps=array("d", [math.log(rng.uniform(0.01, 1.0)) for _ in range(n_action)]),
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


class PipelineProducer:
    """The actor side: ``RedisPipelineActor.push``, one message per actor batch."""

    def __init__(self, url: str, queue: str, messages: list[BatchMessage]) -> None:
        never_used = RolloutBatchSource(  # the bench pushes ready-made batches; nothing is generated
            engine=RolloutEngine(),
            requests=lambda step: [],
            credit_assigner=ConstantCredit(),
            settings=RolloutSettings(max_steps=1),
        )
        self.actor = RedisPipelineActor(never_used, redis_url=url, queue_key=queue, max_queue_len=None)
        self.messages = messages

    async def connect(self) -> None:
        await self.actor.connect()

    async def run(self) -> None:
        for message in self.messages:
            await self.actor.push(message)

    async def close(self) -> None:
        await self.actor.aclose()


class PipelineConsumer:
    """The learner side: ``RedisBatchSource.next_batch`` until every item arrived, a checkpoint
    committed every ``ack_every`` batches (acknowledged by the next claim, the last one on close)."""

    def __init__(self, url: str, queue: str, work: Workload, *, read: bool) -> None:
        self.source = RedisBatchSource(
            url,
            queue_key=queue,
            min_items=work.learner_items,
            wait_timeout_s=60,
            keep_trained_messages=KEEP_TRAINED,
        )
        self.total_items, self.learner_items = work.total_items, work.learner_items
        self.ack_every, self.read = work.ack_every, read

    async def connect(self) -> None:
        await self.source.connect()

    async def run(self) -> None:
        got = batches = 0
        while got < self.total_items:
            # The last batch may be short of learner_items: ask only for what is left.
            self.source.min_items = min(self.learner_items, self.total_items - got)
            batch = await self.source.next_batch()
            if self.read:
                read_arrays(batch.items)
            got += len(batch.items)
            batches += 1
            if batches % self.ack_every == 0 or got == self.total_items:
                self.source.state_dict()  # what the checkpoint stores
                self.source.checkpoint_committed(batches)
        assert got == self.total_items, got

    async def finish(self) -> None:
        """Acknowledge the last checkpoint (``aclose`` does) and close."""
        await self.source.aclose()

    async def close(self) -> None:
        await self.source.aclose()


class RawProducer:
    """``RPUSH`` of pre-made blobs, one per message."""

    def __init__(self, url: str, queue: str, blobs: list[bytes]) -> None:
        import redis.asyncio as redis_asyncio

        self.redis = redis_asyncio.Redis.from_url(url)
        self.queue, self.blobs = queue, blobs

    async def connect(self) -> None:
        await self.redis.ping()

    async def run(self) -> None:
        for blob in self.blobs:
            await self.redis.rpush(self.queue, blob)

    async def close(self) -> None:
        await self.redis.aclose()


class RawExactlyOnceConsumer:
    """The exactly-once design's commands through plain redis-py: per learner batch a pipelined
    ``BLMOVE`` + ``LMOVE`` s + ``LLEN`` into a processing list, and every ``ack_every`` batches a
    ``MULTI`` moving the claimed messages to the trained list with ``LTRIM`` and ``SET`` of the count."""

    def __init__(self, url: str, queue: str, work: Workload) -> None:
        import redis.asyncio as redis_asyncio

        self.redis = redis_asyncio.Redis.from_url(url)
        self.queue, self.count, self.per_pop, self.ack_every = queue, work.count, work.per_pop, work.ack_every
        self.processing, self.trained, self.acked = (
            f"{queue}:{part}:raw" for part in ("processing", "trained", "acked")
        )
        self.claimed = self.acknowledged = 0

    async def connect(self) -> None:
        await self.redis.ping()

    async def claim(self, count: int) -> int:
        pipe = self.redis.pipeline(transaction=False)
        pipe.blmove(self.queue, self.processing, 5, "LEFT", "RIGHT")
        for _ in range(count - 1):
            pipe.lmove(self.queue, self.processing, "LEFT", "RIGHT")
        pipe.llen(self.queue)
        *moved, _length = await pipe.execute()
        if moved[0] is None:
            raise TimeoutError("raw consumer: nothing to claim for 5 s")
        return sum(raw is not None for raw in moved)

    async def acknowledge(self) -> None:
        pipe = self.redis.pipeline(transaction=True)
        for _ in range(self.claimed - self.acknowledged):
            pipe.lmove(self.processing, self.trained, "LEFT", "RIGHT")
        pipe.ltrim(self.trained, -KEEP_TRAINED, -1)
        pipe.set(self.acked, self.claimed)
        await pipe.execute()
        self.acknowledged = self.claimed

    async def run(self) -> None:
        batches = 0
        while self.claimed < self.count:
            self.claimed += await self.claim(min(self.per_pop, self.count - self.claimed))
            batches += 1
            if batches % self.ack_every == 0:
                await self.acknowledge()

    async def finish(self) -> None:
        if self.acknowledged < self.claimed:
            await self.acknowledge()

    async def close(self) -> None:
        await self.redis.aclose()


class RawBlpopConsumer:
    """``BLPOP`` with the learner's batching: per learner batch, wait for one message and (when a batch
    spans several) take the rest with an ``LPOP`` in the same round trip."""

    def __init__(self, url: str, queue: str, work: Workload) -> None:
        import redis.asyncio as redis_asyncio

        self.redis = redis_asyncio.Redis.from_url(url)
        self.queue, self.count, self.per_pop = queue, work.count, work.per_pop

    async def connect(self) -> None:
        await self.redis.ping()

    async def pop(self, count: int) -> int:
        rest: list[bytes] | None = []
        if count == 1:
            popped = await self.redis.blpop([self.queue], timeout=5)
        else:
            pipe = self.redis.pipeline(transaction=False)
            pipe.blpop([self.queue], timeout=5)
            pipe.lpop(self.queue, count - 1)
            popped, rest = await pipe.execute()
        if popped is None:
            raise TimeoutError("raw consumer: nothing to pop for 5 s")
        return 1 + len(rest or [])

    async def run(self) -> None:
        got = 0
        while got < self.count:
            got += await self.pop(min(self.per_pop, self.count - got))

    async def finish(self) -> None:
        return None

    async def close(self) -> None:
        await self.redis.aclose()


Producer = PipelineProducer | RawProducer
Consumer = PipelineConsumer | RawExactlyOnceConsumer | RawBlpopConsumer


@attrs.frozen
class Workload:
    """What every side moves: the messages, blobs as long as their encodings, the learner's batching
    and acknowledgements."""

    messages: list[BatchMessage]
    payloads: list[bytes]
    blobs: list[bytes]
    learner_items: int
    ack_every: int

    @classmethod
    def build(cls, args: argparse.Namespace) -> Workload:
        messages = [
            synthetic_message(i, items=args.items_per_message, tokens=args.tokens, seed=args.seed)
            for i in range(args.messages)
        ]
        payloads = [encode_message(m) for m in messages]
        rng = random.Random(args.seed)
        blobs = [rng.randbytes(len(p)) for p in payloads]
        return cls(messages, payloads, blobs, args.learner_items or args.items_per_message, args.ack_every)

    @property
    def count(self) -> int:
        """Messages moved."""
        return len(self.messages)

    @property
    def total_items(self) -> int:
        return sum(len(m.items) for m in self.messages)

    @property
    def per_pop(self) -> int:
        """Messages per learner batch."""
        return math.ceil(self.learner_items / len(self.messages[0].items))

    def producer(self, side: str, url: str, queue: str) -> Producer:
        if side.startswith("raw"):
            return RawProducer(url, queue, self.blobs)
        return PipelineProducer(url, queue, self.messages)

    def consumer(self, side: str, url: str, queue: str) -> Consumer:
        if side == "raw_exactly_once":
            return RawExactlyOnceConsumer(url, queue, self)
        if side == "raw_blpop":
            return RawBlpopConsumer(url, queue, self)
        return PipelineConsumer(url, queue, self, read=side == "pipeline_read")


async def run_same_loop(work: Workload, side: str, url: str, queue: str) -> tuple[float, float]:
    """Wall and process CPU seconds of producer and consumer together."""
    producer, consumer = work.producer(side, url, queue), work.consumer(side, url, queue)
    await producer.connect()
    await consumer.connect()
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(producer.run(), consumer.run())
    await consumer.finish()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await producer.close()
    await consumer.close()
    return elapsed, cpu


def producer_process(conn: Connection, args: argparse.Namespace, url: str) -> None:
    """A producer in its own process (as an actor runs): builds the same workload, then per request
    ``(side, queue)`` connects, says ``ready``, pushes everything on ``go`` and says ``done``."""
    work = Workload.build(args)

    async def serve(side: str, queue: str) -> None:
        producer = work.producer(side, url, queue)
        await producer.connect()
        conn.send("ready")
        assert conn.recv() == "go"
        await producer.run()
        await producer.close()
        conn.send("done")

    while (request := conn.recv()) is not None:
        asyncio.run(serve(*request))


async def run_other_process(
    work: Workload, side: str, url: str, queue: str, conn: Connection
) -> tuple[float, float]:
    """Wall seconds, and process CPU seconds of the consumer (this process)."""
    consumer = work.consumer(side, url, queue)
    await consumer.connect()
    conn.send((side, queue))
    assert conn.recv() == "ready"
    started, cpu = time.perf_counter(), time.process_time()
    conn.send("go")
    await consumer.run()
    await consumer.finish()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert conn.recv() == "done"
    await consumer.close()
    return elapsed, cpu


def _collate() -> Callable[[list[SAWItem]], object] | None:
    try:
        from ludic_train.collate import collate_saw_items
    except ImportError:
        return None
    return lambda items: collate_saw_items(items, pad_token_id=0)


COLLATE = _collate()
READ_SIDE = "collate_saw_items" if COLLATE is not None else "tuples"


def read_arrays(items: list[SAWItem]) -> None:
    """What the learner does with a batch next: collate it (or, without ludic-train, read every
    array a trainer collates, as tuples)."""
    if COLLATE is not None:
        COLLATE(items)
        return
    for item in items:
        item.input_ids, item.action_mask, item.actor_logps  # noqa: B018 - the reads are the point


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


# (faster side, baseline): reported as baseline time / side time, per repeat and of the best times.
RATIOS = (
    ("pipeline", "raw_exactly_once"),
    ("pipeline", "raw_blpop"),
    ("pipeline_read", "raw_exactly_once"),
    ("raw_exactly_once", "raw_blpop"),
)


async def measure(args: argparse.Namespace, url: str, conn: Connection | None) -> dict[str, Any]:
    work = Workload.build(args)
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    for repeat in range(args.repeats):
        # Rotate the order so that no side always runs on a warmer (or a more loaded) machine.
        turn = repeat % len(SIDES)
        for side in SIDES[turn:] + SIDES[:turn]:
            queue = f"bench:{side}:{repeat}"
            if conn is None:
                wall, seconds = await run_same_loop(work, side, url, queue)
            else:
                wall, seconds = await run_other_process(work, side, url, queue, conn)
            times[side].append(wall)
            cpu[side].append(seconds)
    items = work.total_items
    best = {side: min(values) for side, values in times.items()}
    message_bytes = statistics.fmean(len(p) for p in work.payloads)
    result: dict[str, Any] = {
        "benchmark": "redis_pipeline",
        "wire_version": WIRE_VERSION,
        "producer": "process" if conn is not None else "same_loop",
        "messages": args.messages,
        "items_per_message": args.items_per_message,
        "tokens_per_item": args.tokens,
        "learner_items": work.learner_items,
        "messages_per_learner_batch": work.per_pop,
        "ack_every_batches": work.ack_every,
        "message_bytes_mean": message_bytes,
        "bytes_per_token": message_bytes / (args.items_per_message * args.tokens),
        "repeats": args.repeats,
        "read_side": READ_SIDE,
    }
    for side, baseline in RATIOS:
        ratios = [raw / own for raw, own in zip(times[baseline], times[side], strict=True)]
        result[f"{side}_vs_{baseline}_throughput"] = spread(ratios)
        result[f"{side}_vs_{baseline}_throughput_best"] = best[baseline] / best[side]
        cpu_ratios = [raw / own for raw, own in zip(cpu[baseline], cpu[side], strict=True)]
        result[f"{side}_vs_{baseline}_cpu"] = spread(cpu_ratios)
    for side in SIDES:
        result[f"{side}_items_per_s"] = items / best[side]
        result[f"{side}_mb_per_s"] = sum(len(p) for p in work.payloads) / best[side] / 1e6
        result[f"{side}_ms_per_message"] = best[side] / args.messages * 1e3
        result[f"{side}_cpu_ms_per_message"] = statistics.median(cpu[side]) / args.messages * 1e3
    result.update(codec_times(work.messages, work.payloads))
    result.update({f"{side}_s_all": values for side, values in times.items()})
    result.update({f"{side}_cpu_s_all": values for side, values in cpu.items()})
    result["headline"] = {
        "pipeline: push, claim, decode, acknowledge (items/s)": round(result["pipeline_items_per_s"]),
        "raw redis-py, the same commands (items/s)": round(result["raw_exactly_once_items_per_s"]),
        "raw RPUSH/BLPOP (items/s)": round(result["raw_blpop_items_per_s"]),
        "pipeline / raw same commands (median of repeats)": round(
            result["pipeline_vs_raw_exactly_once_throughput"]["median"], 2
        ),
        "the same, by process CPU (median of repeats)": round(
            result["pipeline_vs_raw_exactly_once_cpu"]["median"], 2
        ),
        "pipeline / raw RPUSH/BLPOP (median of repeats)": round(
            result["pipeline_vs_raw_blpop_throughput"]["median"], 2
        ),
        f"pipeline with {READ_SIDE} / raw same commands": round(
            result["pipeline_read_vs_raw_exactly_once_throughput"]["median"], 2
        ),
        "bytes per token on the wire": round(result["bytes_per_token"], 2),
    }
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
    p.add_argument(
        "--ack-every",
        type=int,
        default=1,
        help="learner batches per acknowledged checkpoint (default 1: every batch, the most Redis work)",
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--producer",
        choices=("same_loop", "process", "both"),
        default="both",
        help="where the producer runs: on the consumer's event loop (every cost on one core), in a "
        "second process (as actors do), or both, one after the other (default)",
    )
    args = p.parse_args(argv)
    if args.ack_every < 1:
        p.error(f"--ack-every must be >= 1, got {args.ack_every}")
    facts = machine_facts()
    topologies = ("same_loop", "process") if args.producer == "both" else (args.producer,)
    try:
        with local_redis_server() as url:
            results = {topology: measure_topology(args, url, topology) for topology in topologies}
    except RedisServerNotFound as exc:
        emit({"benchmark": "redis_pipeline", "skipped": str(exc)}, facts=facts, headline=None)
        return 0
    if len(results) == 1:
        (result,) = results.values()
        headline = result.pop("headline")
    else:
        # The same-loop run's numbers at the top level (as a single run writes them), the other run's
        # under its own key; the headline holds both runs' ratios.
        result = results["same_loop"]
        same_loop_headline = result.pop("headline")
        process = results["process"]
        process.pop("headline")
        result["producer"] = "both"
        result["producer_process"] = process
        headline = {
            "pipeline: push, claim, decode, acknowledge (items/s), same loop / second process": (
                f"{result['pipeline_items_per_s']:,.0f} / {process['pipeline_items_per_s']:,.0f}"
            ),
            "raw redis-py, the same commands (items/s), same loop / second process": (
                f"{result['raw_exactly_once_items_per_s']:,.0f} / {process['raw_exactly_once_items_per_s']:,.0f}"
            ),
            **{
                f"{label}, {where}": round(run[f"pipeline_vs_{baseline}_{by}"]["median"], 2)
                for where, run in (("same loop", result), ("second process", process))
                for label, baseline, by in (
                    ("pipeline / raw same commands", "raw_exactly_once", "throughput"),
                    ("the same, by CPU", "raw_exactly_once", "cpu"),
                    ("pipeline / raw RPUSH/BLPOP", "raw_blpop", "throughput"),
                )
            },
            "bytes per token on the wire": same_loop_headline["bytes per token on the wire"],
        }
    emit(result, facts=facts, headline=headline)
    return 0


def measure_topology(args: argparse.Namespace, url: str, topology: str) -> dict[str, Any]:
    """One measurement with the producer on the consumer's loop or in a second process."""
    if topology == "same_loop":
        return asyncio.run(measure(args, url, None))
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(target=producer_process, args=(theirs, args, url))
    child.start()
    try:
        return asyncio.run(measure(args, url, ours))
    finally:
        ours.send(None)
        child.join(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
