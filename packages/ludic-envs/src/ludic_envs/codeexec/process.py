"""Run one program in the sandbox: fresh directory, isolation, limits, capped output, full cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from ludic_core.errors import ConfigError
from ludic_core.logs import get_logger
from ludic_envs.codeexec.limits import SandboxLimits
from ludic_envs.codeexec.memcap import MemoryPolicy, RunMemoryCap
from ludic_envs.codeexec.network import DEFAULT_NETWORK_METHODS, NetworkMethod, check_network_methods
from ludic_envs.codeexec.procscan import kill_pids, pids_of_uid, pids_with_marker
from ludic_envs.codeexec.result import ExecutionResult, IsolationReport, LimitKind
from ludic_envs.codeexec.rootfs import DEVICES, RootSpec

__all__ = ["ExecutionRequest", "SandboxIdentity", "execute"]

log = get_logger(__name__)
T = TypeVar("T")

LAUNCHER = str(Path(__file__).with_name("_launcher.py"))
MARKER_VAR = "LUDIC_SANDBOX_RUN"
_WATCH_INTERVAL_S = 0.02
_SWEEP_ROUNDS = 50
STDOUT, STDERR = 1, 2
CLEANUP_GRACE_S = 5.0
"""How long each cleanup step may take (the launcher reaping the killed run and exiting, its pipes
ending) before it is forced. Generous: a loaded host can stall a process for seconds, and a forced
step is reported in the result's ``isolation.notes``, never raised."""


@attrs.frozen
class SandboxIdentity:
    """Who the program runs as: a dedicated ``uid``/``gid`` (root hosts) or None for the caller's own."""

    uid: int | None = None
    gid: int | None = None


def _str_tuple(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


@attrs.frozen
class ExecutionRequest:
    """``argv`` runs in a fresh directory holding ``files`` (name → text); ``stdin`` is fed to it."""

    argv: tuple[str, ...] = attrs.field(converter=_str_tuple)
    files: Mapping[str, str] = attrs.field(factory=dict)
    stdin: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.argv:
            raise ConfigError("ExecutionRequest.argv must name a program")
        for name in self.files:
            if not name or "/" in name or name in (".", ".."):
                raise ConfigError(f"ExecutionRequest.files: {name!r} must be a plain file name")


def _scrubbed_env(workdir: str, token: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        MARKER_VAR: token,
    }


class _Run:
    """Mutable bookkeeping of one execution: which limit fired first, the output kept so far, its
    memory cap, and ``stopped``, resolved by whatever ends the run (program exit, launcher exit, a
    limit)."""

    def __init__(self, limits: SandboxLimits, memory: RunMemoryCap, loop: asyncio.AbstractEventLoop) -> None:
        self.limits = limits
        self.memory = memory
        self.limit: LimitKind | None = None
        self.stopped: asyncio.Future[None] = loop.create_future()
        self.output = {STDOUT: bytearray(), STDERR: bytearray()}
        self.truncated = {STDOUT: False, STDERR: False}
        self.notes: list[str] = []

    def stop(self) -> None:
        _settle(self.stopped)

    def hit(self, limit: LimitKind) -> None:
        if self.limit is None:
            self.limit = limit
        self.stop()

    def capture(self, fd: int, data: bytes) -> None:
        """Keep output up to the cap; past it, flag the run (it is killed) and drop the rest.

        Reading on past the cap, rather than pausing the pipe, is what lets the pipe reach end of
        file once the run is dead: a paused pipe that is never drained never reports its end, and
        asyncio waits for every pipe before it calls a subprocess transport finished.
        """
        buf = self.output[fd]
        cap = self.limits.stdout_bytes if fd == STDOUT else self.limits.stderr_bytes
        room = cap - len(buf)
        if room > 0:
            buf.extend(data[:room])
        if len(data) > room:
            self.truncated[fd] = True
            self.hit("output")


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _settled(future: asyncio.Future[None], timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``future``; False if it is still pending (never raises on timeout)."""
    if not future.done():
        await asyncio.wait({future}, timeout=timeout)
    return future.done()


class _LauncherProtocol(asyncio.SubprocessProtocol):
    """The launcher process: captures its stdout/stderr (the program inherits them) and reports its
    exit, the end of both output pipes, and the end of the whole transport, each as a future."""

    def __init__(self, run: _Run, loop: asyncio.AbstractEventLoop) -> None:
        self._run = run
        self._open_outputs = {STDOUT, STDERR}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.outputs_closed: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self._run.capture(fd, data if isinstance(data, bytes) else data.encode())

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_outputs.discard(fd)
        if not self._open_outputs:
            _settle(self.outputs_closed)

    def process_exited(self) -> None:
        # Normally after the program's exit event; earlier only when the launcher's setup failed.
        _settle(self.exited)
        self._run.stop()

    def connection_lost(self, exc: Exception | None) -> None:
        _settle(self.finished)


class _StatusProtocol(asyncio.Protocol):
    """The launcher's JSON status lines: ``setup`` once, then ``exit`` when the program exits."""

    def __init__(self, run: _Run, loop: asyncio.AbstractEventLoop) -> None:
        self._run = run
        self._pending = b""
        self.events: list[dict[str, Any]] = []
        self.program_exited = False
        self.closed: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        *lines, self._pending = (self._pending + data).split(b"\n")
        for line in lines:
            self._parse(line)

    def eof_received(self) -> bool | None:
        self._parse(self._pending)
        self._pending = b""
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        _settle(self.closed)

    def _parse(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if isinstance(event, dict):
            self.events.append(event)
            if "cgroup_error" in event:
                self._run.memory.fall_back(str(event["cgroup_error"]))
            if event.get("event") == "exit":
                self.program_exited = True
                self._run.stop()


def _feed_stdin(transport: asyncio.SubprocessTransport, data: bytes) -> None:
    """Queue ``data`` on the program's stdin and close it once written. A program that exits or
    closes stdin without reading it all breaks the pipe; asyncio drops the rest quietly."""
    pipe = transport.get_pipe_transport(0)
    if isinstance(pipe, asyncio.WriteTransport):
        pipe.write(data)
        pipe.write_eof()


def _run_pids(identity: SandboxIdentity, token: str, session_id: int | None) -> list[int]:
    """Live processes of the run, the launcher excluded (it stays root / unmarked to reap them)."""
    if identity.uid is not None:
        return pids_of_uid(identity.uid)
    return pids_with_marker(f"{MARKER_VAR}={token}".encode(), session_id, exclude=session_id)


async def _watch(run: _Run, identity: SandboxIdentity, token: str, session_id: int, started: float) -> None:
    """Return once the run has stopped or a wall-time / process-count / memory limit fired."""
    deadline = started + run.limits.wall_s
    while not run.stopped.done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            run.hit("wall_time")
            return
        pids = _run_pids(identity, token, session_id)
        # RLIMIT_NPROC holds the line under a dedicated uid; this also covers the shared-uid fallback.
        if len(pids) > run.limits.max_processes:
            run.hit("processes")
            return
        if run.memory.exceeded(pids):
            run.hit("memory")
            return
        await _settled(run.stopped, min(_WATCH_INTERVAL_S, remaining))


async def _kill_run(identity: SandboxIdentity, token: str, session_id: int | None) -> int:
    """Kill every live process of the run until none is left; returns how many were found."""
    found: set[int] = set()
    for _ in range(_SWEEP_ROUNDS):
        pids = _run_pids(identity, token, session_id)
        if not pids:
            return len(found)
        found.update(pids)
        if identity.uid is not None and shutil.which("kill"):
            # kill(-1) from inside the uid signals all of its processes at once, so a fork loop
            # cannot outrun the sweep.
            killer = await asyncio.create_subprocess_exec(
                "kill", "-KILL", "-1", user=identity.uid, group=identity.gid, extra_groups=[],
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await killer.wait()
        kill_pids(pids)
        await asyncio.sleep(0.005)
    log.warning(
        "sandbox_sweep_incomplete", uid=identity.uid, left=len(_run_pids(identity, token, session_id))
    )
    return len(found)


@attrs.define
class _Launch:
    """What one execution opened: closed and awaited by :func:`_finish` on every path."""

    run: _Run
    status: _StatusProtocol
    launcher: _LauncherProtocol
    status_transport: asyncio.BaseTransport | None = None
    transport: asyncio.SubprocessTransport | None = None
    session_id: int | None = None


async def _finish(launch: _Launch, identity: SandboxIdentity, token: str) -> int:
    """Kill the run, let the launcher reap it, and close every transport while the loop still runs.

    Returns how many processes of the run were still alive. Never raises for anything the program
    did: a launcher that does not exit in time is killed, pipes that stay open are closed, and both
    are noted on the run.
    """
    run, launcher, transport = launch.run, launch.launcher, launch.transport
    run.stop()
    found = await _kill_run(identity, token, launch.session_id)
    if transport is not None:
        if not await _settled(launcher.exited, CLEANUP_GRACE_S):
            run.notes.append(f"cleanup: the launcher did not exit within {CLEANUP_GRACE_S} s; killed it")
            with contextlib.suppress(ProcessLookupError):
                transport.kill()
            await _settled(launcher.exited, CLEANUP_GRACE_S)
        # The launcher exits only once every descendant is reaped, so nothing holds the output
        # pipes now; the wait is bounded all the same.
        if not await _settled(launcher.outputs_closed, CLEANUP_GRACE_S):
            run.notes.append(f"cleanup: output pipes still open {CLEANUP_GRACE_S} s after the run; closed")
        transport.close()
        await _settled(launcher.finished, CLEANUP_GRACE_S)
    if launch.status_transport is not None:
        await _settled(launch.status.closed, CLEANUP_GRACE_S if transport is not None else 0)
        launch.status_transport.close()
        await _settled(launch.status.closed, CLEANUP_GRACE_S)
    return found


async def _to_the_end(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` to its end even when the caller is cancelled meanwhile, then re-raise the
    cancellation: cleanup that must not be cut short (it closes transports and reaps processes)."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


def _prepare_workdir(base_dir: str, files: Mapping[str, str], identity: SandboxIdentity) -> str:
    workdir = tempfile.mkdtemp(prefix="run-", dir=base_dir)
    for name, text in files.items():
        Path(workdir, name).write_text(text, encoding="utf-8")
    if identity.uid is not None and identity.gid is not None:
        for path in (workdir, *(os.path.join(workdir, n) for n in files)):
            os.chown(path, identity.uid, identity.gid)
    return workdir


def _remove_workdir(workdir: str) -> None:
    def make_writable(_func: object, path: str, _exc: object) -> None:
        # A program may have left unreadable/unwritable entries; give them back and retry.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    if sys.version_info >= (3, 12):
        shutil.rmtree(workdir, onexc=make_writable)
    else:
        shutil.rmtree(workdir, onerror=make_writable)


def _classify(run: _Run, returncode: int | None, stderr: str) -> LimitKind | None:
    if run.limit is not None:
        return run.limit
    if returncode == -signal.SIGXCPU:
        return "cpu_time"
    if returncode == -signal.SIGKILL and "MemoryError" not in stderr:
        # RLIMIT_CPU's hard limit (soft + 1 s) ends a program that ignores SIGXCPU with SIGKILL.
        return "cpu_time"
    if returncode == -signal.SIGXFSZ or "File too large" in stderr:
        return "file_size"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory"
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "BlockingIOError" in stderr):
        return "processes"
    return None


async def execute(
    request: ExecutionRequest,
    *,
    limits: SandboxLimits,
    identity: SandboxIdentity,
    base_dir: str,
    isolate_network: bool = True,
    network_methods: Sequence[NetworkMethod] = DEFAULT_NETWORK_METHODS,
    root: RootSpec | None = None,
    memory_policy: MemoryPolicy | None = None,
) -> ExecutionResult:
    """Run ``request`` once; never raises for anything the program does.

    With ``isolate_network``, the ``network_methods`` are tried in order until one is in force (see
    :data:`NetworkMethod`); the result's ``isolation`` says which one, or why none could be.
    ``root``: the file system the run sees, built from nothing (see :mod:`~ludic_envs.codeexec.rootfs`;
    a pool computes it once); ``None``: the host's own. ``memory_policy`` says how the memory cap holds for the
    whole run (default: the watchdog's sum, see :mod:`~ludic_envs.codeexec.memcap`).

    On every way out (the program exits, a limit fires, the caller is cancelled) every process of
    the run is killed and reaped and every pipe and transport is closed before this returns.
    """
    loop = asyncio.get_running_loop()
    token = uuid.uuid4().hex
    policy = memory_policy if memory_policy is not None else MemoryPolicy(methods=("aggregate",))
    workdir = _prepare_workdir(base_dir, request.files, identity)
    root_dir = tempfile.mkdtemp(prefix="root-", dir=base_dir)  # the mount point of the run's root
    try:
        memory = policy.open(int(limits.memory_bytes), int(limits.max_processes), token)
    except BaseException:
        _remove_workdir(workdir)
        os.rmdir(root_dir)
        raise
    run = _Run(limits, memory, loop)
    launch = _Launch(run=run, status=_StatusProtocol(run, loop), launcher=_LauncherProtocol(run, loop))
    status_read, status_write = os.pipe()
    status_file = os.fdopen(status_read, "rb", buffering=0)  # the status transport owns it once connected
    cfg = {
        "workdir": workdir,
        "argv": list(request.argv),
        "env": _scrubbed_env(workdir, token),
        "status_fd": status_write,
        "isolate_network": isolate_network,
        "network_methods": list(check_network_methods(network_methods)),
        "root": None if root is None else root.to_config(),
        "root_dir": root_dir,
        "devices": list(DEVICES),
        "cgroup": memory.group,
        "uid": identity.uid,
        "gid": identity.gid,
        "cpu_s": max(1, math.ceil(limits.cpu_s)),
        "memory_bytes": int(limits.memory_bytes),
        "file_size_bytes": int(limits.file_size_bytes),
        "max_open_files": int(limits.max_open_files),
        "max_processes": int(limits.max_processes),
        "tmpfs_bytes": int(limits.tmpfs_bytes),
    }
    started = time.monotonic()
    leftovers = 0
    try:
        try:
            launch.status_transport, _ = await loop.connect_read_pipe(lambda: launch.status, status_file)
            launch.transport, _ = await loop.subprocess_exec(
                lambda: launch.launcher, sys.executable, "-I", "-S", LAUNCHER, json.dumps(cfg),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(status_write,), start_new_session=True, cwd=base_dir,
            )  # fmt: skip
        finally:
            # The launcher holds its own copy; ours would keep the status pipe from ever ending.
            os.close(status_write)
            if launch.status_transport is None:
                status_file.close()
        launch.session_id = launch.transport.get_pid()  # start_new_session: it leads its own session
        _feed_stdin(launch.transport, request.stdin.encode("utf-8"))
        await _watch(run, identity, token, launch.session_id, started)
    finally:
        # Whatever is still alive now (the program after a limit, or processes it left behind after
        # it exited) is killed; the launcher reaps them and then exits, which ends the pipes.
        exited_first = launch.status.program_exited and run.limit is None
        try:
            found = await _to_the_end(_finish(launch, identity, token))
            if memory.method == "cgroup" and memory.exceeded([]) and run.limit is None:
                run.limit = "memory"  # the OOM killer ended a process, maybe the program itself
        finally:
            try:
                await _to_the_end(memory.release(CLEANUP_GRACE_S))
            finally:
                _remove_workdir(workdir)
                with contextlib.suppress(OSError):
                    os.rmdir(root_dir)
        if exited_first:
            leftovers = found
    duration = time.monotonic() - started
    events = launch.status.events
    setup = next((e for e in events if e.get("event") == "setup"), {})
    exit_event = next((e for e in events if e.get("event") == "exit"), None)
    returncode: int | None = None if exit_event is None else int(exit_event["exit_code"])
    stdout = run.output[STDOUT].decode("utf-8", errors="replace")
    stderr = run.output[STDERR].decode("utf-8", errors="replace")
    setup_error = None if setup.get("ok") else str(setup.get("error", "the sandbox launcher did not report"))
    setup_notes = ("network_error", "network_note", "private_root_error")
    notes = tuple(str(setup[k]) for k in setup_notes if k in setup)
    uid = setup.get("uid")
    isolation = IsolationReport(
        uid=uid if isinstance(uid, int) else None,
        dedicated_uid=identity.uid is not None,
        network_isolated=bool(setup.get("network_isolated")),
        network_method=setup.get("network_method"),
        private_root=bool(setup.get("private_root")),
        read_only=tuple(str(d) for d in setup.get("read_only", ())),
        masked_sockets=tuple(str(p) for p in setup.get("masked_sockets", ())),
        memory_method=memory.method,
        notes=(*notes, *memory.notes, *run.notes),
    )
    return ExecutionResult(
        exit_code=returncode if returncode is not None and returncode >= 0 else None,
        signal=-returncode if returncode is not None and returncode < 0 else None,
        stdout=stdout,
        stderr=stderr,
        duration_s=duration,
        limit=_classify(run, returncode, stderr),
        stdout_truncated=run.truncated[STDOUT],
        stderr_truncated=run.truncated[STDERR],
        leftover_processes=leftovers,
        setup_error=setup_error,
        isolation=isolation,
    )
