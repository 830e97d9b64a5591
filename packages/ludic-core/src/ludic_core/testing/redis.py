"""A Redis server for pipeline tests: ``LUDIC_REDIS_URL`` when set (CI or a developer's own server),
else a private ``redis-server`` from :func:`ludic_core.pipeline.local_server.local_redis_server`; the
test is skipped, with the reason, when neither is available. Needs pytest (imported on use)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ludic_core.pipeline.local_server import RedisServerNotFound, local_redis_server

__all__ = ["redis_url_for_tests"]


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
            import pytest

            pytest.skip(f"{exc}; or set LUDIC_REDIS_URL")
        yield url
