"""Run blocking calls off the event loop in threads that a timeout may abandon.

``asyncio.to_thread`` runs work on the loop's default executor, whose threads the interpreter joins at
exit: a call abandoned after a timeout (a hung SDK call, an env step stuck in a C extension) keeps the
process alive until it returns, minutes later or never. A Python thread cannot be killed, so the next
best thing is a **daemon** thread: the awaiting coroutine gets its timeout at once, and the stuck call
no longer holds up the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["run_in_daemon_thread"]

T = TypeVar("T")


async def run_in_daemon_thread(fn: Callable[[], T], *, name: str = "ludic-blocking-call") -> T:
    """Run ``fn()`` in a fresh daemon thread and await its result (or its exception).

    Cancelling the awaiting task (``asyncio.wait_for``, ``asyncio.timeout``) returns control at once;
    the thread finishes in the background and its result is dropped. One thread per call: meant for
    calls that block for a long or unknown time, not for per-token work.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting coroutine, never swallowed here
            _call_soon(loop, deliver, None, exc)
        else:
            _call_soon(loop, deliver, result, None)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await future


def _call_soon(
    loop: asyncio.AbstractEventLoop,
    deliver: Callable[[T | None, BaseException | None], None],
    result: T | None,
    error: BaseException | None,
) -> None:
    # The loop may have closed while an abandoned call was still running: nobody awaits it any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(deliver, result, error)
