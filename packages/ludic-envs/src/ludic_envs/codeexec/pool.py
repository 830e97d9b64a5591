"""A process-wide pool that runs sandboxed programs with bounded concurrency."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ludic_core.errors import ConfigError, LudicTimeoutError
from ludic_core.logs import get_logger
from ludic_core.validation import check_int
from ludic_envs.codeexec.identities import UidLease, claim_uids
from ludic_envs.codeexec.limits import SandboxLimits
from ludic_envs.codeexec.memcap import DEFAULT_MEMORY_METHODS, MemoryMethod, MemoryPolicy
from ludic_envs.codeexec.network import DEFAULT_NETWORK_METHODS, NetworkMethod, check_network_methods
from ludic_envs.codeexec.process import CLEANUP_GRACE_S, ExecutionRequest, SandboxIdentity, execute
from ludic_envs.codeexec.result import ExecutionResult
from ludic_envs.codeexec.rootfs import RootSpec, root_spec
from ludic_envs.codeexec.testcases import TestCase, TestOutcome, TestReport, parse_tests

__all__ = ["SandboxPool", "default_pool"]

log = get_logger(__name__)
T = TypeVar("T")
# Enough for every run's cleanup (its kill sweep, then CLEANUP_GRACE_S per forced step).
_CLOSE_TIMEOUT_S = 4 * CLEANUP_GRACE_S + 10.0


def _world_executable(path: str) -> bool:
    """Can a uid with no groups run ``path``? Every directory on the way must be world-searchable."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for i in range(2, len(parts)):
        mode = os.stat(os.sep.join(parts[:i])).st_mode
        if not mode & stat.S_IXOTH:
            return False
    mode = os.stat(real).st_mode
    return bool(mode & stat.S_IXOTH and mode & stat.S_IROTH)


def _default_python(dedicated_uid: bool) -> str:
    if not dedicated_uid or _world_executable(sys.executable):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and _world_executable(candidate):
            return candidate
    raise ConfigError(
        f"no Python interpreter that the sandbox uid can run: {sys.executable} is not world-executable "
        "and neither is /usr/bin/python3; pass python_executable="
    )


class SandboxPool:
    """Runs programs in sandboxes, at most ``max_concurrency`` at a time across the whole process.

    The pool owns an event loop in a background thread; every run happens there, so the bound holds
    for callers on any thread or event loop: ``await pool.run(code, tests)`` from async code,
    ``pool.run_sync(code, tests)`` from sync code (envs). Each concurrent slot has its own dedicated
    uid when the process is root (``drop_privileges``, default: when root).

    With ``private_root`` (default) each run sees a file system built from nothing: a capped tmpfs
    with read-only binds of what its interpreter needs and no other host path (see
    :mod:`~ludic_envs.codeexec.rootfs`). Settled once, when the pool starts: how the memory cap holds
    for a whole run (``memory_methods``, tried in order, see :mod:`~ludic_envs.codeexec.memcap`).
    """

    def __init__(
        self,
        *,
        max_concurrency: int = 4,
        limits: SandboxLimits | None = None,
        isolate_network: bool = True,
        network_methods: Sequence[NetworkMethod] = DEFAULT_NETWORK_METHODS,
        private_root: bool = True,
        memory_methods: Sequence[MemoryMethod] = DEFAULT_MEMORY_METHODS,
        drop_privileges: bool | None = None,
        python_executable: str | None = None,
        base_dir: str | None = None,
    ) -> None:
        check_int("SandboxPool.max_concurrency", max_concurrency, 1)
        self.max_concurrency = max_concurrency
        self.limits = limits or SandboxLimits()
        self.isolate_network = isolate_network
        self.network_methods = check_network_methods(network_methods)
        self.private_root = private_root
        self._roots: dict[str, RootSpec] = {}  # by interpreter
        self.memory_policy = MemoryPolicy.for_host(memory_methods)
        as_root = os.geteuid() == 0
        self.drop_privileges = as_root if drop_privileges is None else drop_privileges
        self._lease: UidLease | None = claim_uids(max_concurrency) if self.drop_privileges else None
        self.python_executable = python_executable or _default_python(self.drop_privileges)
        self._base_dir = tempfile.mkdtemp(prefix="ludic-sandbox-", dir=base_dir)
        if self.drop_privileges:
            os.chmod(self._base_dir, 0o711)  # sandbox uids may enter their own run dir, not list others
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ludic-sandbox-pool", daemon=True)
        self._thread.start()
        self._slots: asyncio.Queue[SandboxIdentity] = self._call_soon(self._make_slots())
        self._runs: set[asyncio.Task[Any]] = set()  # touched on the pool's loop only
        self._closed = False

    def _call_soon(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a short bookkeeping coroutine on the pool's loop and wait for it (bounded)."""
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CLOSE_TIMEOUT_S)
        except concurrent.futures.TimeoutError as exc:
            raise LudicTimeoutError(
                f"the sandbox pool's event loop did not answer within {_CLOSE_TIMEOUT_S} s"
            ) from exc

    async def _make_slots(self) -> asyncio.Queue[SandboxIdentity]:
        queue: asyncio.Queue[SandboxIdentity] = asyncio.Queue()
        for i in range(self.max_concurrency):
            if self._lease is not None:
                uid = self._lease.uids[i]
                queue.put_nowait(SandboxIdentity(uid=uid, gid=uid))
            else:
                queue.put_nowait(SandboxIdentity())
        return queue

    # --- running on the pool's loop -------------------------------------------------------------

    def _root_for(self, program: str) -> RootSpec | None:
        if not self.private_root:
            return None
        if program not in self._roots:
            self._roots[program] = root_spec(program)
        return self._roots[program]

    async def _execute_here(self, request: ExecutionRequest, limits: SandboxLimits) -> ExecutionResult:
        identity = await self._slots.get()
        try:
            return await execute(
                request,
                limits=limits,
                identity=identity,
                base_dir=self._base_dir,
                isolate_network=self.isolate_network,
                network_methods=self.network_methods,
                root=self._root_for(request.argv[0]),
                memory_policy=self.memory_policy,
            )
        finally:
            self._slots.put_nowait(identity)

    async def _run_here(
        self, code: str, tests: Sequence[TestCase], limits: SandboxLimits, all_or_nothing: bool
    ) -> TestReport:
        outcomes: list[TestOutcome] = []
        for index, test in enumerate(tests):
            result = await self._execute_here(test.request(self.python_executable, code), limits)
            outcome = TestOutcome(index=index, test=test, passed=test.passed(result), result=result)
            outcomes.append(outcome)
            if all_or_nothing and not outcome.passed:
                break
        return TestReport(outcomes=outcomes, total=len(tests), skipped=len(tests) - len(outcomes))

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise ConfigError("this SandboxPool is closed")
        return asyncio.run_coroutine_threadsafe(self._tracked(coro), self._loop)

    async def _tracked(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` as one of the pool's runs, which :meth:`close` cancels and waits for."""
        task = asyncio.current_task()
        assert task is not None
        self._runs.add(task)
        try:
            return await coro
        finally:
            self._runs.discard(task)

    # --- public API -------------------------------------------------------------------------------

    async def execute(
        self, request: ExecutionRequest, *, limits: SandboxLimits | None = None
    ) -> ExecutionResult:
        """Run one program (any ``argv``) in a fresh sandbox."""
        return await asyncio.wrap_future(self._submit(self._execute_here(request, limits or self.limits)))

    async def run(
        self,
        code: str,
        tests: Iterable[TestCase | Mapping[str, Any] | str] | Mapping[str, Sequence[str]],
        *,
        limits: SandboxLimits | None = None,
        all_or_nothing: bool = False,
    ) -> TestReport:
        """Run Python ``code`` against ``tests`` (each test in its own sandboxed process)."""
        parsed = parse_tests(tests)
        future = self._submit(self._run_here(code, parsed, limits or self.limits, all_or_nothing))
        return await asyncio.wrap_future(future)

    def run_sync(
        self,
        code: str,
        tests: Iterable[TestCase | Mapping[str, Any] | str] | Mapping[str, Sequence[str]],
        *,
        limits: SandboxLimits | None = None,
        all_or_nothing: bool = False,
        timeout_s: float | None = None,
    ) -> TestReport:
        """Blocking :meth:`run` for sync callers; must not be called from the pool's own loop.

        ``timeout_s`` defaults to every test's wall limit plus queueing slack.
        """
        parsed = parse_tests(tests)
        lim = limits or self.limits
        future = self._submit(self._run_here(code, parsed, lim, all_or_nothing))
        wait = timeout_s if timeout_s is not None else len(parsed) * (lim.wall_s + 10.0) + 60.0
        try:
            return future.result(wait)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise LudicTimeoutError(
                f"sandbox run of {len(parsed)} tests did not finish within {wait} s"
            ) from exc

    def close(self) -> None:
        """Cancel the runs in progress, wait until each has killed and reaped its processes and closed
        its pipes, then stop and close the pool's loop and remove its directory."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            try:
                shutdown.result(_CLOSE_TIMEOUT_S)
            except Exception as exc:  # still stop the loop below; what could not close is logged
                log.warning("sandbox_pool_shutdown_incomplete", error=repr(exc))
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("sandbox_pool_loop_still_running", timeout_s=_CLOSE_TIMEOUT_S)
        else:
            self._loop.close()
        shutil.rmtree(self._base_dir, ignore_errors=True)
        if self._lease is not None:
            self._lease.release()

    async def _shutdown(self) -> None:
        """On the pool's loop: cancel every run; each one's own cleanup closes its transports."""
        runs = list(self._runs)
        for task in runs:
            task.cancel()
        if runs:
            await asyncio.wait(runs, timeout=_CLOSE_TIMEOUT_S)
        await self._loop.shutdown_asyncgens()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: SandboxPool | None = None
_default_lock = threading.Lock()


def default_pool() -> SandboxPool:
    """The process-wide pool that code envs share unless given their own (closed at exit).

    Concurrency is ``$LUDIC_SANDBOX_CONCURRENCY`` or the CPU count.
    """
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            concurrency = int(os.environ.get("LUDIC_SANDBOX_CONCURRENCY", os.cpu_count() or 2))
            _default = SandboxPool(max_concurrency=concurrency)
            atexit.register(_default.close)
        return _default
