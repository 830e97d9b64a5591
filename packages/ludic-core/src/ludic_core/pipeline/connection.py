"""Redis connections for the pipeline: a lazy ``redis.asyncio`` import, bounded waits, clear errors.

Every Redis call goes through :func:`redis_call`, which bounds it with a timeout and turns redis-py's
exceptions into :class:`~ludic_core.errors.TransportError` / :class:`~ludic_core.errors.LudicTimeoutError`
naming the server (password redacted), the key and what was being done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError, missing_extra
from ludic_core.pipeline.packing import Buffer
from ludic_core.validation import check_number

__all__ = ["AsyncRedis", "PinnedConnection", "close_client", "connect_redis", "redact_url", "redis_call"]

T = TypeVar("T")


class AsyncRedis(Protocol):
    """The part of ``redis.asyncio.Redis`` the pipeline uses (values come back as ``bytes``)."""

    async def ping(self) -> Any: ...

    async def rpush(self, name: str, *values: bytes) -> int: ...

    async def blpop(self, keys: list[str], timeout: float = 0) -> tuple[bytes, bytes] | None: ...

    async def llen(self, name: str) -> int: ...

    async def blmove(
        self, first_list: str, second_list: str, timeout: float, src: str, dest: str
    ) -> bytes | None: ...

    async def lrange(self, name: str, start: int, end: int) -> list[bytes]: ...

    async def aclose(self) -> None: ...


Command = tuple[str | bytes | int | float, ...]
"""A Redis command and its arguments, as redis-py packs them."""

# The most command lists a PinnedConnection keeps packed (a learner uses one per claim size).
_MAX_PACKED = 256


class PinnedConnection:
    """One connection of a ``redis.asyncio`` client's pool, kept for a hot round trip of raw commands.

    The learner claims on every batch: a ``BLMOVE``, some ``LMOVE`` s and an ``LLEN`` in one round trip;
    an actor pushes every batch with an ``RPUSH``.
    Through a redis-py pipeline object that round trip pays, per call, a pooled connection taken and
    given back (a lock, events, metrics), a retry wrapper and the pipeline's bookkeeping: about as much
    again as Redis takes. Here the commands are packed, written in one send and their replies read in
    order on a connection taken from the pool once, which is what the pipeline does on the wire; Redis
    sees the same commands in the same order on one connection.

    There is no retry: a claim sent again after a lost reply would move more messages than the caller
    counts, so every failure is raised (the caller reads its positions back from Redis). Any failure
    or cancellation while commands are in flight (a timeout, a dropped connection, an error reply that
    leaves later replies unread) disconnects the connection, since its replies can no longer be matched
    to its commands; the next call reconnects it. ``aclose`` gives it back to the pool.
    """

    def __init__(self, client: object) -> None:
        self._pool: Any = cast(Any, client).connection_pool
        self._connection: Any = None
        # The bytes of each command list sent so far: a learner sends the same few lists over and over
        # (one per claim size), and packing one costs as much as its reply takes to parse.
        self._packed: dict[tuple[Command, ...], list[bytes]] = {}

    async def execute(self, commands: tuple[Command, ...], *, keep_packed: bool = True) -> list[Any]:
        """Send ``commands`` in one write and return their raw replies, in order (bytes, ints, None,
        lists); an error reply raises redis-py's ``ResponseError``.

        ``keep_packed=False`` for commands that are never sent twice (an acknowledgement up to a new
        position): they are packed for this call only, and never hashed as a key of the packed lists.
        """
        connection = await self._connected()
        packed = self._packed.get(commands) if keep_packed else None
        if packed is None:
            packed = connection.pack_commands(commands)
            if keep_packed:
                if len(self._packed) >= _MAX_PACKED:
                    self._packed.clear()
                self._packed[commands] = packed
        return await self._round_trip(connection, packed, len(commands))

    async def push(self, key: str, payloads: Sequence[Sequence[Buffer]]) -> int:
        """``RPUSH key`` of ``payloads``, each given in parts: they are written as they are, so the
        transport's one join of the command is the only copy of a payload (redis-py packs a whole
        payload); returns the list's length."""
        head = [b"*%d\r\n$5\r\nRPUSH\r\n" % (2 + len(payloads)), *_bulk((key.encode(),))]
        packed = head + [chunk for parts in payloads for chunk in _bulk(parts)]
        (length,) = await self._round_trip(await self._connected(), packed, 1)
        return int(length)

    async def _connected(self) -> Any:
        if self._connection is None:
            self._connection = await self._pool.get_connection()
        return self._connection

    async def _round_trip(self, connection: Any, packed: Sequence[Buffer], replies: int) -> list[Any]:
        try:
            await connection.send_packed_command(packed, check_health=False)
            return [await connection.read_response() for _ in range(replies)]
        except BaseException:
            # Unread replies would answer the next call's commands: drop the socket (nowait: nothing to
            # flush, and a cancelled caller must not wait on a dead server).
            await connection.disconnect(nowait=True)
            raise

    async def aclose(self) -> None:
        """Give the connection back to the pool (before the client is closed)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._pool.release(connection)


def _bulk(parts: Sequence[Buffer]) -> list[Buffer]:
    """A Redis bulk string of the bytes of ``parts``, in parts."""
    return [b"$%d\r\n" % sum(map(len, parts)), *parts, b"\r\n"]


async def close_client(client: AsyncRedis, pinned: PinnedConnection | None) -> None:
    """Give ``pinned``'s connection back to ``client``'s pool, then close ``client`` (also when that
    fails)."""
    try:
        if pinned is not None:
            await pinned.aclose()
    finally:
        await client.aclose()


def redact_url(url: str) -> str:
    """``redis://user:secret@host:6379/0`` → ``redis://user:***@host:6379/0`` (for error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable redis url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError, OSError)


async def redis_call(awaitable: Awaitable[T], *, what: str, url: str, timeout_s: float) -> T:
    """Await one Redis command with a timeout; failures become Ludic transport/timeout errors."""
    try:
        # asyncio.timeout, not wait_for: it awaits in the caller's task instead of wrapping the
        # command in a new one, a measurable share of a round trip that moves one message.
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except TimeoutError as exc:
        raise LudicTimeoutError(
            f"Redis at {redact_url(url)} did not answer {what} within {timeout_s} s"
        ) from exc
    except _redis_errors() as exc:
        raise TransportError(
            f"Redis at {redact_url(url)} failed {what}: {type(exc).__name__}: {exc}"
        ) from exc


async def connect_redis(url: str, *, connect_timeout_s: float) -> AsyncRedis:
    """A ``redis.asyncio`` client for ``url`` that has answered PING.

    It has no socket timeout: every command goes through :func:`redis_call`, which bounds it (blocking
    ones by their own wait plus a margin), and redis-py would wrap every send of a client with a
    socket timeout in a task of its own.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(
            f"redis_url must be a non-empty str such as 'redis://127.0.0.1:6379/0', got {url!r}"
        )
    check_number("connect_timeout_s", connect_timeout_s, minimum=0, exclusive=True)
    try:
        import redis.asyncio as redis_asyncio
    except ImportError as exc:
        raise missing_extra("ludic-core", "redis", "redis") from exc
    try:
        client = redis_asyncio.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=None,
            decode_responses=False,
        )
    except ValueError as exc:  # a malformed URL (wrong scheme, bad port)
        raise ConfigError(f"invalid redis_url {redact_url(url)!r}: {exc}") from exc
    typed = cast(AsyncRedis, client)
    try:
        await redis_call(typed.ping(), what="PING", url=url, timeout_s=connect_timeout_s)
    except BaseException:
        await typed.aclose()
        raise
    return typed
