"""CPU per Redis round trip: the pipeline's kept connection against a plain redis-py command.

The pipeline's actor pushes each batch with one ``RPUSH`` and its learner claims with one round trip,
both on a connection they keep (``ludic_core.pipeline.connection.PinnedConnection``): the commands are
packed and written at once and their replies read in order, with no pooled connection taken and given
back per call. This benchmark times that against ``redis.asyncio``'s own ``rpush`` of the same payload,
both bounded by the same timeout wrapper (``redis_call``), on a private ``redis-server`` started here.
Each repeat runs both sides back to back (alternating which goes first); the JSON gives the median
process CPU per round trip, for a tiny payload (what a call costs besides the bytes) and for one as
large as a pipeline message of 16 items × 1k tokens.

Prints one JSON object (``{"skipped": ...}`` when there is no redis-server binary).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from _machine import emit, machine_facts

from ludic_core.pipeline.connection import PinnedConnection, redis_call
from ludic_core.pipeline.local_server import RedisServerNotFound, local_redis_server

SIDES = ("kept_connection", "redis_py")


async def cpu_per_push(url: str, side: str, payload: bytes, pushes: int) -> float:
    """Process CPU seconds per ``RPUSH`` of ``payload`` through ``side``."""
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(url)
    await client.ping()
    kept = PinnedConnection(client)
    queue = f"bench:{side}"
    try:
        started = time.process_time()
        for _ in range(pushes):
            if side == "kept_connection":
                call = kept.execute((("RPUSH", queue, payload),), keep_packed=False)
            else:
                call = client.rpush(queue, payload)
            await redis_call(call, what="RPUSH", url=url, timeout_s=30)
        return (time.process_time() - started) / pushes
    finally:
        await kept.aclose()
        await client.delete(queue)
        await client.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=2000, help="round trips per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[10, 95_000],
        help="payload bytes (default: tiny, one message)",
    )
    args = parser.parse_args(argv)
    facts = machine_facts()
    result: dict[str, Any] = {"benchmark": "redis_round_trip", "pushes": args.pushes, "repeats": args.repeats}
    try:
        with local_redis_server() as url:
            for size in args.sizes:
                payload = bytes(size)
                times: dict[str, list[float]] = {side: [] for side in SIDES}
                for repeat in range(args.repeats):
                    for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                        times[side].append(asyncio.run(cpu_per_push(url, side, payload, args.pushes)))
                medians = {side: statistics.median(values) for side, values in times.items()}
                result[f"payload_{size}"] = {
                    "cpu_us_per_rpush": {side: seconds * 1e6 for side, seconds in medians.items()},
                    "redis_py_vs_kept_connection": medians["redis_py"] / medians["kept_connection"],
                }
    except RedisServerNotFound as exc:
        emit({"benchmark": "redis_round_trip", "skipped": str(exc)}, facts=facts, headline=None)
        return 0
    headline = {
        f"{size}-byte RPUSH: redis-py CPU / kept connection CPU": round(
            result[f"payload_{size}"]["redis_py_vs_kept_connection"], 2
        )
        for size in args.sizes
    }
    emit(result, facts=facts, headline=headline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
