"""The body of a rollout worker process (see :mod:`ludic_core.rollout_workers`).

The worker builds its engine once, says ``("ready", base_seed, deterministic_ids)``, then runs every
episode it receives as a task of its own event loop, answering ``("done", id, EpisodeResult)`` or
``("error", id, *error_fields)``. It stops when the caller closes its pipe (or dies): it cancels what
still runs and closes its engine. SIGINT is ignored: a Ctrl-C reaches the whole process group, and the
caller, which catches it, stops the workers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ludic_core.errors import ConfigError

__all__ = ["error_fields", "serve"]


def error_fields(exc: BaseException) -> tuple[bytes | None, str, str, str]:
    """``(pickled exception or None, type name, message, traceback text)``: what the caller needs to
    raise it again, with the worker's traceback."""
    payload: bytes | None
    try:
        payload = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        payload = None
    text = "".join(traceback.format_exception(exc))
    return payload, type(exc).__name__, str(exc), text


def serve(build: bytes, from_caller: Connection, to_caller: Connection) -> None:
    """Process target: run the worker until the caller closes ``from_caller``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_serve(build, from_caller, to_caller))
    finally:
        to_caller.close()


async def _build_engine(build: bytes, stack: contextlib.AsyncExitStack) -> Any:
    from ludic_core.engine import RolloutEngine

    made = pickle.loads(build)()
    if hasattr(made, "__aenter__"):
        made = await stack.enter_async_context(made)
    if not isinstance(made, RolloutEngine):
        raise ConfigError(
            "a rollout worker's engine builder must return a RolloutEngine or an async context manager "
            f"yielding one, got {type(made).__name__}"
        )
    return made


def _receive(from_caller: Connection) -> Any:
    try:
        return from_caller.recv()
    except (EOFError, OSError):
        return None


async def _serve(build: bytes, from_caller: Connection, to_caller: Connection) -> None:
    async with contextlib.AsyncExitStack() as stack:
        try:
            engine = await _build_engine(build, stack)
        except Exception as exc:
            to_caller.send(("start_failed", *error_fields(exc)))
            return
        to_caller.send(("ready", engine.base_seed, engine.deterministic_ids))

        def reply(episode_id: int, task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                return
            error = task.exception()
            try:
                if error is None:
                    try:
                        to_caller.send(("done", episode_id, task.result()))
                        return
                    except OSError:
                        raise
                    except Exception as exc:  # a result that does not pickle
                        error = exc
                to_caller.send(("error", episode_id, *error_fields(error)))
            except OSError:
                pass  # the caller has gone; the closed pipe ends the receive loop too

        running: set[asyncio.Task[Any]] = set()
        while (message := await asyncio.to_thread(_receive, from_caller)) is not None:
            _, episode_id, episode_index, request, run_settings = message
            task = asyncio.ensure_future(engine._run_request(episode_index, request, run_settings))
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda t, i=episode_id: reply(i, t))
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
