"""Episodes in worker processes: what ``RolloutSettings(workers=N)`` runs.

Each of N *spawned* processes builds its own engine once (from the engine's picklable ``worker_engine``,
or its own factories and seed settings) and runs the episodes it is sent; the calling engine keeps
indices, seeds, scheduling under ``concurrency``, the rollout log and the failure policy, so a call
returns the same episodes in the same order whatever N (``workers=1`` starts no process). A worker
(:func:`serve`) answers ``("ready", base_seed, deterministic_ids)``, then ``("done", id, fields)`` or
``("error", id, *error_fields)`` per episode, records travelling as tuples of their slots (:func:`dumps`);
it stops when the caller closes its pipe. The caller bounds engine builds (``start_timeout_s``) and each
result (``episode_timeout_s`` plus at most :data:`RESULT_GRACE_S`), since a worker blocked in an env step
cannot fire its own timeout; a worker's error is re-raised with its traceback as the cause, a dead worker
raises :class:`RolloutWorkerError`, and any error, cancellation or ``KeyboardInterrupt`` stops every
worker. Usage and pickling rules: docs/concepts/rollouts.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copyreg
import functools
import io
import itertools
import multiprocessing
import multiprocessing.connection
import operator
import pickle
import signal
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import attrs

from ludic_core import requests, types
from ludic_core.data_fields import slot_setters
from ludic_core.errors import ConfigError, LudicError, LudicTimeoutError
from ludic_core.logs import get_logger

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "RESULT_GRACE_S",
    "RolloutWorkerError",
    "RolloutWorkerPool",
    "WorkerTraceback",
    "dumps",
    "serve",
]

log = get_logger(__name__)

DEFAULT_START_TIMEOUT_S = 300.0
"""The bound on a worker's start: importing Ludic and building its engine (a tokenizer, a client)."""

RESULT_GRACE_S = 30.0
"""The most an episode's result may take beyond ``episode_timeout_s`` to reach the caller."""

_STOP_TIMEOUT_S = 5.0  # a stopped worker's time to close its engine before it is terminated

_SPAWN = multiprocessing.get_context("spawn")


class RolloutWorkerError(LudicError):
    """A rollout worker process died, or sent something the caller cannot read."""


class WorkerTraceback(Exception):
    """The traceback of an error raised in a rollout worker: the ``__cause__`` of that error in the
    caller, so the caller's traceback shows where in the worker it happened."""

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}"""'


def remote_error(fields: tuple[bytes | None, str, str, str], where: str) -> BaseException:
    """The caller's copy of an error a worker reported as :func:`error_fields`: the original exception
    when it unpickles, else a :class:`RolloutWorkerError` with its type and message."""
    payload, type_name, message, traceback_text = fields
    error: BaseException | None = None
    if payload is not None:
        try:
            error = pickle.loads(payload)
        except Exception:
            error = None
    if not isinstance(error, BaseException):
        error = RolloutWorkerError(f"{type_name}: {message}")
    error.add_note(f"raised in {where}")
    error.__cause__ = WorkerTraceback(traceback_text)
    return error


@attrs.define(eq=False)
class _Worker:
    index: int
    process: BaseProcess
    to_worker: Connection
    from_worker: Connection
    ready: concurrent.futures.Future[tuple[int, bool]] = attrs.field(factory=concurrent.futures.Future)
    pending: dict[int, concurrent.futures.Future[Any]] = attrs.field(factory=dict)
    failure: BaseException | None = None
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    @property
    def name(self) -> str:
        return f"rollout worker {self.index} (pid {self.process.pid})"


def _settle(future: concurrent.futures.Future[Any], value: Any, error: BaseException | None) -> None:
    # The caller may have given up on the future (its wait timed out, its task was cancelled).
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_result(value) if error is None else future.set_exception(error)


def _read(worker: _Worker) -> None:
    """Thread body: hand each message of ``worker`` to the future that waits for it, until it exits."""
    failure: BaseException | None = None
    while failure is None:
        try:
            message = pickle.loads(worker.from_worker.recv_bytes())
        except (EOFError, OSError):
            break
        except Exception as exc:  # an unpicklable result
            failure = RolloutWorkerError(f"{worker.name} sent a message that cannot be read: {exc!r}")
            break
        kind = message[0]
        if kind == "ready":
            _settle(worker.ready, message[1:], None)
        elif kind == "start_failed":
            _settle(worker.ready, None, remote_error(message[1:], worker.name))
        else:  # "done" or "error", for one episode
            with worker.lock:
                future = worker.pending.pop(message[1], None)
            if future is not None:
                if kind == "done":
                    _settle(future, message[2], None)
                else:
                    _settle(future, None, remote_error(message[2:], worker.name))
    if failure is None:
        multiprocessing.connection.wait([worker.process.sentinel], _STOP_TIMEOUT_S)  # reaps nothing
    with worker.lock:
        if failure is None:
            _join(worker, _STOP_TIMEOUT_S)
            failure = RolloutWorkerError(f"{worker.name} exited (exit code {worker.process.exitcode})")
        worker.failure = failure
        waiting = [worker.ready, *worker.pending.values()]
        worker.pending.clear()
    for future in waiting:
        if not future.done():
            _settle(future, None, failure)
    worker.from_worker.close()


def _join(worker: _Worker, timeout_s: float) -> bool:
    """Whether ``worker`` has exited, waiting up to ``timeout_s``; under ``worker.lock``: a process joined
    by two threads at once (the reader's on EOF, :func:`_stop`'s) looks alive forever to the loser."""
    worker.process.join(timeout=timeout_s)
    return worker.process.exitcode is not None


def _stop(workers: Sequence[_Worker]) -> None:
    """Stop every worker: closing its pipe asks it to finish (it closes its engine), then terminate,
    then kill, each bounded. Never raises; safe to call twice."""
    for worker in workers:
        worker.to_worker.close()
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for worker in workers:
        with worker.lock:
            if _join(worker, max(0.0, deadline - time.monotonic())):
                continue
            for end in (worker.process.terminate, worker.process.kill):
                end()
                if _join(worker, _STOP_TIMEOUT_S):
                    break
            else:
                log.warning("rollout_workers.not_stopped", worker=worker.name)


class RolloutWorkerPool:
    """N spawned worker processes, each running episodes on the engine that ``build`` returns.

    The :class:`~ludic_core.engine.RolloutEngine` owns one while its calls run with ``workers > 1``;
    use it through the engine. :meth:`start` waits for every worker's engine, :meth:`run_episode` sends
    one episode to the least busy worker, :meth:`close` stops them all (also done when the pool is
    garbage-collected or the interpreter exits).
    """

    def __init__(self, build: Callable[[], Any], size: int, *, start_timeout_s: float) -> None:
        try:
            self._build = pickle.dumps(build, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise ConfigError(
                f"RolloutSettings.workers={size} runs episodes in spawned processes, which build their "
                f"engine from a pickled copy, and {build!r} cannot be pickled ({type(exc).__name__}: {exc}); "
                "use module-level functions, classes or functools.partial of them as the engine's "
                "factories, or give the engine a picklable worker_engine that builds it (and its client) "
                "in each worker"
            ) from exc
        self.size = size
        self.start_timeout_s = start_timeout_s
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._finalizer = weakref.finalize(self, _stop, self._workers)

    @property
    def pids(self) -> list[int | None]:
        return [worker.process.pid for worker in self._workers]

    @property
    def alive(self) -> bool:
        return bool(self._workers) and all(
            worker.failure is None and worker.process.exitcode is None for worker in self._workers
        )

    async def start(self, *, base_seed: int, deterministic_ids: bool) -> None:
        """Spawn the workers and wait (``start_timeout_s``) until each has built its engine, which
        must number its episodes as the caller's does (same ``base_seed`` and ``deterministic_ids``)."""
        for index in range(self.size):
            from_worker, worker_end_out = _SPAWN.Pipe(duplex=False)
            worker_end_in, to_worker = _SPAWN.Pipe(duplex=False)
            process = _SPAWN.Process(
                target=serve,
                args=(self._build, worker_end_in, worker_end_out),
                name=f"ludic-rollout-worker-{index}",
                # Not a daemon: a worker's env may start processes of its own (the math grader does).
                daemon=False,
            )
            process.start()
            # The worker holds its own ends now; closing ours lets it see EOF when we go away.
            worker_end_in.close()
            worker_end_out.close()
            worker = _Worker(index, process, to_worker, from_worker)
            self._workers.append(worker)
            threading.Thread(target=_read, args=(worker,), name=f"{worker.name} reader", daemon=True).start()
        waiting = asyncio.gather(*(asyncio.wrap_future(w.ready) for w in self._workers))
        try:
            async with asyncio.timeout(self.start_timeout_s):
                started = await waiting
        except TimeoutError:
            slow = [w.name for w in self._workers if not w.ready.done()]
            raise LudicTimeoutError(
                f"{', '.join(slow)} did not build its engine within start_timeout_s={self.start_timeout_s}"
            ) from None
        for worker, (worker_seed, worker_ids) in zip(self._workers, started, strict=True):
            if (worker_seed, worker_ids) != (base_seed, deterministic_ids):
                raise ConfigError(
                    f"{worker.name} built an engine with base_seed={worker_seed}, "
                    f"deterministic_ids={worker_ids}; the calling engine has base_seed={base_seed}, "
                    f"deterministic_ids={deterministic_ids}, and both must match for the workers' episodes "
                    "to get the seeds and ids they would get in the calling process"
                )
        log.debug("rollout_workers.started", workers=self.size, pids=self.pids)

    async def run_episode(self, episode_index: int, request: Any, run_settings: dict[str, Any]) -> Any:
        """Run one episode in the least busy worker; the fields of its
        :class:`~ludic_core.rollout_results.EpisodeResult` after ``episode_index`` and ``request``."""
        worker = min(self._workers, key=lambda w: len(w.pending))
        episode_id = next(self._ids)
        try:
            message = dumps(("episode", episode_id, episode_index, request, run_settings))
        except Exception as exc:
            raise ConfigError(
                f"the request of episode {episode_index} (env {request.env.kind!r}, protocol "
                f"{request.protocol.kind!r}) cannot be pickled for a rollout worker ({type(exc).__name__}: "
                f"{exc}); its kwargs and factories must pickle under RolloutSettings.workers > 1"
            ) from exc
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with worker.lock:
            if worker.failure is not None:
                raise worker.failure
            worker.pending[episode_id] = future
        worker.to_worker.send_bytes(message)
        episode_timeout_s = run_settings["episode_timeout_s"]
        wait_s = episode_timeout_s + min(episode_timeout_s, RESULT_GRACE_S)
        deadline = asyncio.timeout(wait_s)
        try:
            async with deadline:
                return await asyncio.wrap_future(future)
        except TimeoutError:
            if not deadline.expired():
                raise  # the episode's own error (a LudicTimeoutError is a TimeoutError)
            raise LudicTimeoutError(
                f"{worker.name} did not return episode {episode_index} within {wait_s} s "
                f"(episode_timeout_s={episode_timeout_s} plus the trip); an env step that blocks the "
                "worker's event loop stops its own timeouts: set blocking_step on the env"
            ) from None

    def close(self) -> None:
        """Stop every worker (bounded; see the module docstring)."""
        self._finalizer()


# -- the worker process (spawned: :func:`serve` is its target) --------------------------------------


@functools.cache
def _slots(cls: type) -> tuple[Any, tuple[Any, ...]]:
    return operator.attrgetter(*[field.name for field in attrs.fields(cls)]), slot_setters(cls)


def _rebuild(cls: type, values: tuple[Any, ...]) -> Any:
    record: Any = object.__new__(cls)
    for set_slot, value in zip(_slots(cls)[1], values, strict=True):
        set_slot(record, value)
    return record


def _reduce(record: Any) -> tuple[Any, ...]:
    cls: type = type(record)
    return _rebuild, (cls, _slots(cls)[0](record))


# What an episode's result and a request are made of.
_RECORDS = [types.AgentStep, types.EnvironmentStep, types.TokenTrace, types.Rollout, types.EpisodeFailure]
_SPECS = [requests.RolloutRequest, requests.EnvSpec, requests.ProtocolSpec]
_DISPATCH = copyreg.dispatch_table | dict.fromkeys(
    [*_RECORDS, types.ToolCall, types.ToolResult, *_SPECS], _reduce
)


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
            if (error := task.exception()) is None:
                e = task.result()
                fields = (e.env_seed, e.sampling_seed, e.rollouts, e.failure, e.duration_s)
                try:
                    message = dumps(("done", episode_id, fields))
                except Exception as exc:  # a result that does not pickle
                    error = exc
            if error is not None:
                message = dumps(("error", episode_id, *error_fields(error)))
            with contextlib.suppress(OSError):  # the caller has gone; its closed pipe ends the loop too
                to_caller.send_bytes(message)

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
