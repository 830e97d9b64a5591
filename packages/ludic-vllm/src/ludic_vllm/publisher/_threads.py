"""Run a blocking call (a collective) in a daemon thread and await it with a deadline.

A thread stuck in a collective can never be joined safely; a daemon thread lets the publisher raise on
time and the process exit, while the group is aborted to unblock it where the backend allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["in_daemon_thread"]


def in_daemon_thread(fn: Callable[[], T], *, name: str) -> asyncio.Future[T]:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:
            outcome: tuple[bool, Any] = (False, exc)
        else:
            outcome = (True, result)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
