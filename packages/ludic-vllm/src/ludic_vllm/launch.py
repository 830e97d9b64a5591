"""Start a Ludic vLLM server as a subprocess for scripts and tests, and stop it reliably.

The server runs in its own process session, so stopping it signals the whole group (the API server and
the engine-core and worker processes vLLM spawns) and nothing else. Its output goes to a log file whose
tail is included in every start-up error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from ludic_core.errors import LudicTimeoutError, TransportError
from ludic_core.logs import get_logger
from ludic_vllm._net import is_loopback
from ludic_vllm.control import ServerControl

__all__ = ["VLLMServer", "free_port"]

log = get_logger("ludic_vllm.launch")


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """A ``ludic-vllm serve`` subprocess.

    >>> with VLLMServer("path/to/model", ["--max-model-len", "512"]) as server:  # doctest: +SKIP
    ...     client = VLLMClient(base_url=server.url)

    ``start`` returns once ``/ludic/health`` answers ok (or raises with the log tail, having stopped
    the process); ``stop`` sends SIGTERM to the process group, then SIGKILL after ``stop_timeout_s``.

    Weight routes: with ``api_token`` every caller needs it; without one, a server on a loopback ``host``
    trusts local callers (``trust_loopback`` defaults to that) and any other host refuses them.
    ``load_dirs`` are the directories ``update_from_path`` and LoRA loads may read (a
    :class:`~ludic_vllm.publisher.FilePublisher` in path mode needs its shared directory here).
    """

    def __init__(
        self,
        model: str,
        vllm_args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        api_token: str | None = None,
        trust_loopback: bool | None = None,
        load_dirs: Sequence[str | os.PathLike[str]] = (),
        initial_version: int = 0,
        startup_timeout_s: float = 600.0,
        stop_timeout_s: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        python: str | None = None,
    ) -> None:
        self.model = model
        self.vllm_args = list(vllm_args)
        self.host = host
        self.port = port or free_port(host)
        self.env = dict(env or {})
        self.api_token = api_token
        # The process that starts the server on loopback is its operator: without a token it trusts the
        # local callers it launched the server for. Any other host needs a token.
        self.trust_loopback = (
            (api_token is None and is_loopback(host)) if trust_loopback is None else trust_loopback
        )
        self.load_dirs = [os.fspath(d) for d in load_dirs]
        self.initial_version = initial_version
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.python = python or sys.executable
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="ludic-vllm-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "ludic_vllm.serve",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        cmd += ["--ludic-initial-version", str(self.initial_version)]
        if self.api_token:
            cmd += ["--ludic-api-token", self.api_token]
        if self.trust_loopback:
            cmd.append("--ludic-trust-loopback")
        for directory in self.load_dirs:
            cmd += ["--ludic-load-dir", directory]
        return cmd + self.vllm_args

    def log_tail(self, n_bytes: int = 6000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode("utf-8", errors="replace")

    def start(self) -> VLLMServer:
        if self.process is not None:
            raise TransportError(f"server at {self.url} is already started (pid {self.process.pid})")
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        log.info("server starting", pid=self.process.pid, url=self.url, log=str(self.log_path))
        try:
            asyncio.run(self._wait_ready())
        except BaseException:
            self.stop()
            raise
        return self

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        control = ServerControl(self.url, api_token=self.api_token, timeout_s=10.0)
        try:
            while True:
                assert self.process is not None
                code = self.process.poll()
                if code is not None:
                    raise TransportError(
                        f"vLLM server exited with code {code} during start-up; log {self.log_path}:\n{self.log_tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LudicTimeoutError(
                        f"vLLM server at {self.url} was not healthy within {self.startup_timeout_s:.0f}s; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                try:
                    await control.wait_until_ready(timeout_s=min(2.0, remaining), poll_s=0.5)
                    return
                except LudicTimeoutError:
                    continue
        finally:
            await control.aclose()

    def stop(self) -> int | None:
        """Stop the server's process group; returns the exit code (None if it was never started)."""
        proc, self.process = self.process, None
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("server ignored SIGTERM; killing", pid=proc.pid)
                self._signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=30)
        # Engine/worker children share the group; make sure none outlives the server.
        self._signal_group(proc, signal.SIGKILL)
        log.info("server stopped", pid=proc.pid, returncode=proc.returncode)
        return proc.returncode

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # the group id is the server's pid (start_new_session)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
