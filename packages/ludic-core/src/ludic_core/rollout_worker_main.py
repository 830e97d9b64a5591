"""The body of a rollout worker process (see :mod:`ludic_core.rollout_workers`).

The worker builds its engine once, says ``("ready", base_seed, deterministic_ids)``, then runs every
episode it receives as a task of its own event loop, answering ``("done", id, (env_seed,
sampling_seed, rollouts, failure, duration_s))`` (the caller adds its own request) or ``("error", id,
*error_fields)``. It stops when the caller closes its pipe (or dies): it cancels what still runs and
closes its engine. SIGINT is ignored: a Ctrl-C reaches the whole process group, and the caller, which
catches it, stops the workers itself.

Both ends pickle with :func:`dumps`: records travel as the tuple of their slots, rebuilt through the
slots' setters (their values were checked where they were made), at half the cost of attrs' pickling.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import functools
import io
import operator
import pickle
import signal
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

import attrs

from ludic_core import requests, types
from ludic_core.errors import ConfigError

__all__ = ["dumps", "error_fields", "serve"]


@functools.cache
def _slots(cls: type) -> tuple[Any, tuple[Any, ...]]:
    names = [field.name for field in attrs.fields(cls)]
    return operator.attrgetter(*names), tuple(cls.__dict__[name].__set__ for name in names)


def _rebuild(cls: type, values: tuple[Any, ...]) -> Any:
    record = object.__new__(cls)
    for set_slot, value in zip(_slots(cls)[1], values, strict=True):
        set_slot(record, value)
    return record


def _reduce(record: Any) -> tuple[Any, ...]:
    return _rebuild, (type(record), _slots(type(record))[0](record))


# What an episode's result and a request are made of.
_RECORDS = [types.AgentStep, types.EnvironmentStep, types.TokenTrace, types.Rollout, types.EpisodeFailure]
_RECORDS += [
    types.ToolCall,
    types.ToolResult,
    requests.RolloutRequest,
    requests.EnvSpec,
    requests.ProtocolSpec,
]
_DISPATCH = copyreg.dispatch_table | dict.fromkeys(_RECORDS, _reduce)


def dumps(message: Any) -> bytes:
    """``message`` pickled with the records of an episode as tuples of their slots (module docstring)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(message)
    return buffer.getvalue()


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


def _forward(from_caller: Connection, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Any]) -> None:
    """Thread body: hand each message's bytes to the loop, then ``None`` at EOF (a thread, so that the
    caller's writes never wait for a loop held by a blocking env step)."""
    while True:
        try:
            message: bytes | None = from_caller.recv_bytes()
        except (EOFError, OSError):
            message = None
        loop.call_soon_threadsafe(inbox.put_nowait, message)
        if message is None:
            return


async def _serve(build: bytes, from_caller: Connection, to_caller: Connection) -> None:
    async with contextlib.AsyncExitStack() as stack:
        try:
            engine = await _build_engine(build, stack)
        except Exception as exc:
            to_caller.send_bytes(dumps(("start_failed", *error_fields(exc))))
            return
        to_caller.send_bytes(dumps(("ready", engine.base_seed, engine.deterministic_ids)))

        def reply(episode_id: int, task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                return
            error = task.exception()
            try:
                if error is None:
                    try:
                        e = task.result()
                        fields = (e.env_seed, e.sampling_seed, e.rollouts, e.failure, e.duration_s)
                        to_caller.send_bytes(dumps(("done", episode_id, fields)))
                        return
                    except OSError:
                        raise
                    except Exception as exc:  # a result that does not pickle
                        error = exc
                to_caller.send_bytes(dumps(("error", episode_id, *error_fields(error))))
            except OSError:
                pass  # the caller has gone; the closed pipe ends the receive loop too

        running: set[asyncio.Task[Any]] = set()
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=_forward, args=(from_caller, loop, inbox), daemon=True).start()
        while (message := await inbox.get()) is not None:
            _, episode_id, episode_index, request, run_settings = pickle.loads(message)
            task = asyncio.ensure_future(engine._run_request(episode_index, request, run_settings))
            running.add(task)
            task.add_done_callback(running.discard)
            task.add_done_callback(lambda t, i=episode_id: reply(i, t))
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
