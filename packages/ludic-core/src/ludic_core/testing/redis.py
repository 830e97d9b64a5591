"""A Redis server for pipeline tests: ``LUDIC_REDIS_URL`` when set (CI or a developer's own server),
else a private ``redis-server`` from :func:`ludic_core.pipeline.local_server.local_redis_server`; the
test is skipped, with the reason, when neither is available."""

from __future__ import annotations

import contextlib
import os
import unittest
import uuid
from collections.abc import AsyncIterator, Iterator

from ludic_core.pipeline.local_server import RedisServerNotFound, local_redis_server

__all__ = ["queue_key_for_tests", "redis_url_for_tests"]


def redis_url_for_tests() -> Iterator[str]:
    """Body of a module-scoped fixture: ``yield from redis_url_for_tests()``.

    Without a server it raises :class:`unittest.SkipTest` (which pytest and unittest both report as a
    skip), so this kit needs no test framework of its own."""
    configured = os.environ.get("LUDIC_REDIS_URL")
    if configured:
        yield configured
        return
    with contextlib.ExitStack() as stack:
        try:
            url: str = stack.enter_context(local_redis_server())
        except RedisServerNotFound as exc:
            raise unittest.SkipTest(f"{exc}; or set LUDIC_REDIS_URL") from exc
        yield url


async def queue_key_for_tests(redis_url: str) -> AsyncIterator[str]:
    """Body of an async fixture: ``async for key in queue_key_for_tests(url): yield key``.

    A queue key of the test's own (tests may share a ``LUDIC_REDIS_URL`` server), deleted afterwards
    with every key under it (dead letters, learners' claims and acknowledgements).
    """
    import redis.asyncio as redis_asyncio

    key = f"ludic-test:{uuid.uuid4().hex[:12]}"
    yield key
    client = redis_asyncio.Redis.from_url(redis_url)
    try:
        await client.delete(key, *[k async for k in client.scan_iter(f"{key}:*")])
    finally:
        await client.aclose()
