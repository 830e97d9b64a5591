"""A timeout for the repeated waits of one caller (an agent's model calls), re-armed lazily.

``asyncio.timeout`` schedules a loop timer on entry and cancels it on exit: a Timeout object, a
``TimerHandle``, a heap push and a cancelled handle left in the heap, for every model call. Model-call
limits are long (minutes) and calls short (milliseconds), so :class:`CallTimeout` keeps one timer per
caller and only moves a deadline on each wait. When the timer fires before the current deadline (the
deadline moved on since it was scheduled), it re-arms itself for that deadline; it cancels the waiting
task only once the deadline has really passed. A wait that overruns ends exactly as under
``asyncio.timeout``: the task is cancelled and the block raises ``TimeoutError``; a cancellation from
anyone else propagates unchanged.

Nothing in entering or leaving a block awaits, so a block is a plain ``with`` (no coroutine objects
per call); ``async with`` works too, for callers written against ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from types import TracebackType

__all__ = ["CallTimeout", "call_timeout"]

# Loop timers fire when their time is within the clock's resolution (asyncio's own rule); a deadline
# checked by a timer that fired "on time" must count as reached.
_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution

_current_task = asyncio.current_task
_get_running_loop = asyncio.get_running_loop


class CallTimeout:
    """Bound each ``with timeout.within(seconds):`` block of one caller; one block at a time.

    ``seconds=None`` waits without a bound. Reuse one instance for the calls of one caller, or take
    one from the loop's spare timers with :func:`call_timeout`; a block must not start while another
    of the same instance is running.
    """

    __slots__ = (
        "__weakref__",
        "_cancelling",
        "_deadline",
        "_expired",
        "_handle",
        "_handle_at",
        "_loop",
        "_oneshot",
        "_pool",
        "_seconds",
        "_task",
    )

    def __init__(self) -> None:
        self._seconds: float | None = None
        self._deadline: float | None = None  # of the running block; None between blocks
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._expired = False
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._handle_at: float | None = None  # when the armed timer fires; None: none armed
        # The armed timer's handle, to cancel it for an earlier deadline. A pooled timer (see
        # call_timeout) keeps none: a handle refers to its loop, and the loop's pool must not.
        self._handle: asyncio.TimerHandle | None = None
        self._pool: list[CallTimeout] | None = None  # the spare list it rejoins after each block
        self._oneshot = False  # from call_timeout, not pooled: cancels its timer when the block ends

    def within(self, seconds: float | None) -> CallTimeout:
        """Set the bound of the next block (``None``: unbounded) and return this timeout to enter."""
        if self._task is not None:
            raise RuntimeError("CallTimeout: a block is already running; one block at a time")
        if self._pool is not None:
            raise RuntimeError("CallTimeout: a timer from call_timeout keeps the bound it was given")
        self._seconds = seconds
        return self

    def __enter__(self) -> CallTimeout:
        if self._task is not None:
            raise RuntimeError("CallTimeout: a block is already running; one block at a time")
        task = _current_task()
        if task is None:
            raise RuntimeError("CallTimeout must be used inside a task")
        self._task = task
        self._expired = False
        seconds = self._seconds
        if seconds is None:
            self._deadline = None
            return self
        loop = _get_running_loop()
        self._cancelling = task.cancelling()
        deadline = loop.time() + seconds
        self._deadline = deadline
        # Keep the armed timer when it fires at or before the deadline (it re-arms itself then);
        # schedule a new one only for an earlier deadline, another loop, or none armed. A pooled timer
        # always has the same bound on the same loop, so its deadlines only move forward.
        armed_at = self._handle_at
        if armed_at is None or armed_at > deadline or self._loop is None or self._loop() is not loop:
            if self._handle is not None:
                self._handle.cancel()
            self._arm(loop, deadline)
        return self

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._loop is None or self._loop() is not loop:
            self._loop = weakref.ref(loop)
        self._handle_at = at
        handle = loop.call_at(at, self._on_timer, loop)
        self._handle = None if self._pool is not None else handle

    def _on_timer(self, fired_on: asyncio.AbstractEventLoop) -> None:
        if self._loop is None or self._loop() is not fired_on:
            return  # a timer left on a loop this instance no longer serves
        self._handle_at = None
        self._handle = None
        deadline, task = self._deadline, self._task
        if deadline is None or task is None:
            return  # between blocks: the next block arms a timer again
        if fired_on.time() + _CLOCK_RESOLUTION >= deadline:
            self._expired = True
            task.cancel()
        else:
            self._arm(fired_on, deadline)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, expired = self._task, self._expired
        self._task = None
        self._deadline = None
        self._expired = False
        if self._pool is not None:
            self._pool.append(self)
        elif self._oneshot and self._handle is not None:
            self._handle.cancel()
            self._handle = self._handle_at = None
        # When ours was the cancellation (no other request since the block started), a timeout.
        if (
            expired
            and task is not None
            and task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    async def __aenter__(self) -> CallTimeout:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


_Pools = dict[float | None, list[CallTimeout]]

# Per loop, the idle timers of each bound. Weak: a loop's pools go with the loop (no pooled timer holds
# its loop). The last loop's pools are remembered, so a call builds no weak reference to find them.
_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pools] = weakref.WeakKeyDictionary()
_last: tuple[weakref.ref[asyncio.AbstractEventLoop], _Pools] | None = None

# Bounds are a handful of configured values; a caller that passes ever-new ones (a remaining-time
# budget) gets one-shot timers past this many, not a pool per value.
MAX_POOLED_BOUNDS = 32


def _loop_pools(loop: asyncio.AbstractEventLoop) -> _Pools:
    global _last
    pools = _POOLS.get(loop)
    if pools is None:
        pools = _POOLS[loop] = {}
    _last = (weakref.ref(loop), pools)
    return pools


def call_timeout(seconds: float | None) -> CallTimeout:
    """``with call_timeout(s):`` bounds the block like ``asyncio.timeout(s)``, with an idle
    :class:`CallTimeout` of the same bound from the running loop's spare timers, which it rejoins when
    the block ends.

    Short-lived callers (an episode, an agent's model call) thus share a few timers that each stay
    armed and only move their deadline, instead of each scheduling and cancelling a loop timer; the
    spare timers of a bound grow to the most blocks that ran at once with it and no further. Pools are
    per loop (a timer never serves two loops) and per bound (with one bound, each deadline is later
    than the last, so an armed timer never has to be cancelled).
    """
    loop = _get_running_loop()
    last = _last
    pools = last[1] if last is not None and last[0]() is loop else _loop_pools(loop)
    pool = pools.get(seconds)
    if pool:
        return pool.pop()
    timer = CallTimeout()
    timer._seconds = seconds
    if pool is None and len(pools) >= MAX_POOLED_BOUNDS:
        timer._oneshot = True
        return timer
    if pool is None:
        pool = pools[seconds] = []
    timer._pool = pool
    return timer
