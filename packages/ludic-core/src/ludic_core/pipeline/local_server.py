"""A private, throw-away ``redis-server`` for one-machine runs, tests and benchmarks.

:func:`local_redis_server` starts the ``redis-server`` binary on a free loopback port in a temporary
directory with persistence off (``--save "" --appendonly no``; ``durable=True``: an append-only file
fsynced on every write), waits until it answers PING, yields its URL and stops it afterwards.
:func:`start_redis_server` starts one on a given port and directory, for tests that kill it and
start it again. Nothing here needs the ``redis`` Python package.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ludic_core.errors import LudicError, LudicTimeoutError
from ludic_core.validation import check_number

__all__ = [
    "RedisServerNotFound",
    "find_redis_server",
    "free_loopback_port",
    "local_redis_server",
    "start_redis_server",
]


class RedisServerNotFound(LudicError, FileNotFoundError):
    """No ``redis-server`` binary to start."""


def find_redis_server() -> str | None:
    """``redis-server`` on PATH, else ``/usr/bin/redis-server`` if executable, else ``None``."""
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers_ping(port: int, timeout_s: float = 0.5) -> bool:
    # A raw RESP PING: no client library needed to know the server is up.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def _check_startup_timeout(startup_timeout_s: object) -> None:
    check_number("startup_timeout_s", startup_timeout_s, minimum=0, exclusive=True)


def _executable(binary: str | None) -> str:
    executable = binary or find_redis_server()
    if executable is None:
        raise RedisServerNotFound(
            "no redis-server binary on PATH or at /usr/bin/redis-server (Debian/Ubuntu: apt-get install redis-server)"
        )
    return executable


def _spawn(
    executable: str, workdir: Path, port: int, *, durable: bool, startup_timeout_s: float
) -> subprocess.Popen[bytes]:
    """Start the server and wait for PING; the returned process has exited if it could not start."""
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    command = [
        executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "", *persistence,
        "--dir", str(workdir), "--daemonize", "no",
    ]  # fmt: skip
    # Appended, so the log of a restarted server follows the log of the one before.
    with (workdir / "redis.log").open("ab") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + startup_timeout_s
    while process.poll() is None and time.monotonic() < deadline and not _answers_ping(port):
        time.sleep(0.02)
    return process


def _not_answering(executable: str, workdir: Path, port: int, startup_timeout_s: float) -> LudicTimeoutError:
    log_tail = (workdir / "redis.log").read_text(errors="replace")[-2000:]
    return LudicTimeoutError(
        f"{executable} did not answer PING on 127.0.0.1:{port} within {startup_timeout_s} s; its log:\n{log_tail}"
    )


def start_redis_server(
    workdir: Path,
    *,
    port: int,
    durable: bool = False,
    startup_timeout_s: float = 10.0,
    binary: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``redis-server`` on ``127.0.0.1:port`` with its files in ``workdir``; returns once it
    answers PING. For tests that kill the server and start it again on the same port and files.

    ``durable=True`` turns on the append-only file with ``appendfsync always`` (every answered write
    survives a SIGKILL; a restart in the same ``workdir`` reloads it); else nothing is persisted.
    The caller stops the process. Raises as :func:`local_redis_server`.
    """
    _check_startup_timeout(startup_timeout_s)
    executable = _executable(binary)
    process = _spawn(executable, workdir, port, durable=durable, startup_timeout_s=startup_timeout_s)
    if process.poll() is None and _answers_ping(port):
        return process
    _stop(process)
    raise _not_answering(executable, workdir, port, startup_timeout_s)


@contextlib.contextmanager
def local_redis_server(
    *, startup_timeout_s: float = 10.0, binary: str | None = None, durable: bool = False
) -> Iterator[str]:
    """Yield ``redis://127.0.0.1:<port>/0`` of a fresh server, stopped on exit (``durable``: see
    :func:`start_redis_server`).

    Raises :class:`RedisServerNotFound` without a binary and :class:`LudicTimeoutError` (quoting the
    server's log) if it does not answer PING within ``startup_timeout_s``.
    """
    _check_startup_timeout(startup_timeout_s)
    executable = _executable(binary)
    with tempfile.TemporaryDirectory(prefix="ludic-redis-") as workdir:
        # A port found free can be taken before the server binds it (the server then exits): retry
        # with another port. A server that runs but stays silent is not retried.
        for _attempt in range(3):
            port = free_loopback_port()
            process = _spawn(
                executable, Path(workdir), port, durable=durable, startup_timeout_s=startup_timeout_s
            )
            if process.poll() is None and _answers_ping(port):
                break
            exited = process.poll() is not None
            _stop(process)
            if not exited:
                break
        if process.poll() is not None:
            raise _not_answering(executable, Path(workdir), port, startup_timeout_s)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            _stop(process)
