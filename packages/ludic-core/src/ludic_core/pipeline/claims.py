"""A learner's claims on the pipeline queue, kept in Redis so that a restart finds them.

Each learner has a *consumer* name (one per data-parallel rank, kept across restarts) and three keys:
``<queue>:processing:<consumer>``, the claimed, unacknowledged messages in claim order (a claim is one
atomic ``LMOVE``/``BLMOVE`` from the queue, so two learners never claim one message);
``<queue>:trained:<consumer>``, the last ``keep_trained`` acknowledged messages; and
``<queue>:acked:<consumer>``, the acknowledged count. ``trained ++ processing`` is one log with ``acked``
the boundary: acknowledging up to ``p`` moves it forward, resuming a checkpoint at ``p < acked`` moves it
back so everything after ``p`` is delivered again, each in one ``MULTI`` with the new ``acked``. A
dead-lettered message is replaced, in the same transaction, by :data:`TOMBSTONE`, so positions stay
valid and a re-delivery skips it.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import attrs

from ludic_core.errors import DataError
from ludic_core.pipeline.connection import Command

__all__ = ["TOMBSTONE", "ClaimKeys"]

TOMBSTONE = b"ludic.pipeline.dead-lettered"
"""What replaces a dead-lettered message in a processing list (never a valid msgpack message map)."""


class _Pipelined(Protocol):
    """The pipelined commands of ``redis.asyncio`` used here."""

    def pipeline(self, transaction: bool = True) -> Any: ...


class _RawCommands(Protocol):
    """Raw commands sent in one write, their replies read in order
    (:class:`~ludic_core.pipeline.connection.PinnedConnection`)."""

    async def execute(self, commands: tuple[Command, ...], *, keep_packed: bool = True) -> list[Any]: ...


@attrs.frozen
class ClaimKeys:
    """The Redis keys of one consumer of one queue (see the module docstring)."""

    queue: str
    consumer: str

    @property
    def processing(self) -> str:
        return f"{self.queue}:processing:{self.consumer}"

    @property
    def trained(self) -> str:
        return f"{self.queue}:trained:{self.consumer}"

    @property
    def acked(self) -> str:
        return f"{self.queue}:acked:{self.consumer}"

    # -- reads -------------------------------------------------------------------------------------

    async def read_boundary(self, redis: object) -> tuple[int, int, int]:
        """``(acked, processing length, trained length)`` in one round trip."""
        pipe = cast(_Pipelined, redis).pipeline(transaction=True)
        pipe.get(self.acked)
        pipe.llen(self.processing)
        pipe.llen(self.trained)
        acked, processing, trained = await pipe.execute()
        return int(acked or 0), int(processing), int(trained)

    async def claim(self, connection: _RawCommands, count: int, wait_s: float) -> tuple[list[bytes], int]:
        """Move up to ``count`` messages from the queue to the processing list, waiting up to ``wait_s``
        for the first; returns them, in order, and the queue length after the claim.

        One round trip on one connection: a ``BLMOVE`` then ``count - 1`` ``LMOVE`` s and an ``LLEN``,
        sent in one write. Redis runs one client's commands in order, so the others run once the
        ``BLMOVE`` has returned (at once when the queue holds a message). Each move is atomic on its
        own: a kill part-way leaves the moved ones on the processing list, where a restart re-delivers
        them.
        """
        queue, processing = self.queue, self.processing
        commands = (
            ("BLMOVE", queue, processing, "LEFT", "RIGHT", wait_s),
            *[("LMOVE", queue, processing, "LEFT", "RIGHT")] * (count - 1),
            ("LLEN", queue),
        )
        *moved, length = await connection.execute(commands)
        return [raw for raw in moved if raw is not None], int(length)

    async def fetch(self, redis: Any, start: int, count: int) -> list[bytes]:
        """``count`` messages of the processing list from index ``start`` (re-delivery after a restart)."""
        return list(await redis.lrange(self.processing, start, start + count - 1))

    # -- writes ------------------------------------------------------------------------------------

    async def move_boundary(self, redis: object, *, acked: int, to: int, keep_trained: int) -> None:
        """Move the acknowledged boundary from ``acked`` (as read from Redis) to position ``to``.

        Raises :class:`DataError`, changing nothing, when the lists are too short: forward, the
        processing list lacks messages a checkpoint says were trained (Redis lost writes: run it with
        ``appendonly yes``); backward, the trained list no longer holds what a resume must re-deliver
        (``keep_trained`` too small for how far back the resume goes).
        """
        _, processing, trained = await self.read_boundary(redis)
        if to > acked and to - acked > processing:
            raise DataError(
                f"consumer {self.consumer!r} of {self.queue!r}: the checkpoint consumed messages up to "
                f"position {to} but Redis holds claims only up to {acked + processing} (acked {acked}); "
                "Redis lost acknowledged writes (run it with appendonly yes, appendfsync always)"
            )
        if to < acked and acked - to > trained:
            raise DataError(
                f"consumer {self.consumer!r} of {self.queue!r}: resuming at position {to} must re-deliver "
                f"{acked - to} trained messages but {self.trained!r} keeps only {trained}; raise "
                "RedisBatchSource(keep_trained_messages=...) or resume a newer checkpoint"
            )
        pipe = cast(_Pipelined, redis).pipeline(transaction=True)
        for _ in range(max(0, to - acked)):
            pipe.lmove(self.processing, self.trained, "LEFT", "RIGHT")
        for _ in range(max(0, acked - to)):
            pipe.lmove(self.trained, self.processing, "RIGHT", "LEFT")
        if keep_trained > 0:
            pipe.ltrim(self.trained, -keep_trained, -1)
        else:
            pipe.delete(self.trained)
        pipe.set(self.acked, to)
        await pipe.execute()

    async def acknowledge(self, connection: _RawCommands, *, acked: int, to: int, keep_trained: int) -> None:
        """Move the boundary forward from ``acked`` to ``to`` for the learner that claimed the messages
        and knows its positions: one ``MULTI`` in one round trip on its own connection, with no read
        before it (:meth:`move_boundary` reads first, for a resume).

        Lost writes are found in the transaction's replies: a move that found no message means
        Redis lost claims the checkpoint trained on, and raises :class:`DataError` (the count then
        says ``to``: those messages were trained, and nothing is left to move back).
        """
        moves = to - acked
        trim: Command = (
            ("LTRIM", self.trained, -keep_trained, -1) if keep_trained > 0 else ("DEL", self.trained)
        )
        commands: tuple[Command, ...] = (
            ("MULTI",),
            *[("LMOVE", self.processing, self.trained, "LEFT", "RIGHT")] * moves,
            trim,
            ("SET", self.acked, to),
            ("EXEC",),
        )
        results = (await connection.execute(commands, keep_packed=False))[-1]
        for result in results:
            if isinstance(result, Exception):  # an error reply inside EXEC's (redis-py raises only outside)
                raise result
        found = moves - results[:moves].count(None)
        if found != moves:
            raise DataError(
                f"consumer {self.consumer!r} of {self.queue!r}: acknowledging up to position {to} found "
                f"{found} of the {moves} claimed messages in {self.processing!r}; Redis lost writes (run it "
                "with appendonly yes, appendfsync always)"
            )

    async def dead_letter(self, redis: object, *, index: int, dead_key: str, payload: bytes) -> None:
        """Append ``payload`` to ``dead_key`` and put :data:`TOMBSTONE` at ``index`` of the processing
        list, in one transaction."""
        pipe = cast(_Pipelined, redis).pipeline(transaction=True)
        pipe.rpush(dead_key, payload)
        pipe.lset(self.processing, index, TOMBSTONE)
        await pipe.execute()
