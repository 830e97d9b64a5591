"""A timeout for the repeated waits of one caller (an agent's model calls), re-armed lazily.

``asyncio.timeout`` schedules a loop timer on entry and cancels it on exit: a Timeout object, a
``TimerHandle``, a heap push and a cancelled handle left in the heap, for every model call. Model-call
limits are long (minutes) and calls short (milliseconds), so :class:`CallTimeout` keeps one timer per
caller and only moves a deadline on each wait. When the timer fires before the current deadline (the
deadline moved on since it was scheduled), it re-arms itself for that deadline; it cancels the waiting
task only once the deadline has really passed. A wait that overruns ends exactly as under
``asyncio.timeout``: the task is cancelled and the ``async with`` raises ``TimeoutError``; a
cancellation from anyone else propagates unchanged.
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


class CallTimeout:
    """Bound each ``async with timeout.within(seconds):`` block of one caller; one block at a time.

    ``seconds=None`` waits without a bound. Reuse one instance for the calls of one caller, or take
    one from the loop's spare list with :func:`call_timeout`; a block must not start while another of
    the same instance is running.
    """

    __slots__ = (
        "_cancelling",
        "_deadline",
        "_expired",
        "_handle",
        "_handle_at",
        "_loop",
        "_return_to",
        "_seconds",
        "_task",
    )

    def __init__(self) -> None:
        self._seconds: float | None = None
        self._deadline: float | None = None  # of the running block; None between blocks
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._expired = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._handle_at = 0.0
        self._return_to: list[CallTimeout] | None = None  # the spare list to rejoin after this block

    def within(self, seconds: float | None) -> CallTimeout:
        """Set the bound of the next block (``None``: unbounded) and return this timeout to enter."""
        if self._task is not None:
            raise RuntimeError("CallTimeout: a block is already running; one block at a time")
        self._seconds = seconds
        return self

    async def __aenter__(self) -> CallTimeout:
        if self._task is not None:
            raise RuntimeError("CallTimeout: a block is already running; one block at a time")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("CallTimeout must be used inside a task")
        self._task = task
        self._expired = False
        seconds = self._seconds
        if seconds is None:
            self._deadline = None
            return self
        loop = asyncio.get_running_loop()
        self._cancelling = task.cancelling()
        deadline = loop.time() + seconds
        self._deadline = deadline
        # Keep the armed timer when it fires at or before the deadline (it re-arms itself then);
        # schedule a new one only for an earlier deadline, another loop, or none armed.
        if self._handle is None or self._loop is not loop or self._handle_at > deadline:
            if self._handle is not None:
                self._handle.cancel()
            self._loop = loop
            self._handle_at = deadline
            self._handle = loop.call_at(deadline, self._on_timer, loop)
        return self

    def _on_timer(self, fired_on: asyncio.AbstractEventLoop) -> None:
        if fired_on is not self._loop:
            return  # a timer left on a loop this instance no longer serves
        self._handle = None
        deadline, task, loop = self._deadline, self._task, self._loop
        if deadline is None or task is None or loop is None:
            return  # between blocks: the next block arms a timer again
        if loop.time() + _CLOCK_RESOLUTION >= deadline:
            self._expired = True
            task.cancel()
        else:
            self._handle_at = deadline
            self._handle = loop.call_at(deadline, self._on_timer, loop)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, expired, spare = self._task, self._expired, self._return_to
        self._task = None
        self._deadline = None
        self._expired = False
        self._return_to = None
        if spare is not None:
            spare.append(self)
        # When ours was the cancellation (no other request since the block started), a timeout.
        if (
            expired
            and task is not None
            and task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc


_SPARE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[CallTimeout]] = weakref.WeakKeyDictionary()


def call_timeout(seconds: float | None) -> CallTimeout:
    """``async with call_timeout(s):`` bounds the block like ``asyncio.timeout(s)``, with an idle
    :class:`CallTimeout` from the running loop's spare list, which it rejoins when the block ends.

    Short-lived callers (an episode, an agent's model call) thus share a few timers that each stay
    armed and only move their deadline, instead of each scheduling and cancelling a loop timer; the
    spare list grows to the most blocks that ran at once and no further. One list per loop: a timer
    never serves two loops at once.
    """
    loop = asyncio.get_running_loop()
    spare = _SPARE.get(loop)
    if spare is None:
        spare = _SPARE[loop] = []
    timer = spare.pop() if spare else CallTimeout()
    timer.within(seconds)
    timer._return_to = spare
    return timer
