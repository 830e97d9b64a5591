"""The Redis server for tests: ``LUDIC_REDIS_URL`` when set (CI or a developer's own server), else a
private ``redis-server`` from :func:`ludic_train.pipeline.local_server.local_redis_server`; skips with
the reason when neither is available."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from ludic_train.pipeline.local_server import RedisServerNotFound, local_redis_server


def redis_url_for_tests() -> Iterator[str]:
    """Body of a module-scoped fixture: ``yield from redis_url_for_tests()``."""
    url = os.environ.get("LUDIC_REDIS_URL")
    if url:
        yield url
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(local_redis_server())
        except RedisServerNotFound as exc:
            pytest.skip(f"{exc}; or set LUDIC_REDIS_URL")
        yield url
