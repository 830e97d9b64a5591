"""Missing credentials and unreachable services fail fast with clear errors (not a 5-minute retry)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from ludic_core.errors import ConfigError, TransportError
from ludic_tinker import TinkerTimeouts, connect


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_missing_api_key_is_a_config_error(monkeypatch, tmp_path):
    for name in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="TINKER_API_KEY"):
        connect(base_url="http://127.0.0.1:1")


def test_malformed_api_key_is_a_config_error():
    with pytest.raises(ConfigError, match="tml-"):
        connect(base_url="http://127.0.0.1:1", api_key="sk-not-tinker")


def test_unreachable_service_fails_within_the_reachability_timeout():
    with pytest.raises(TransportError, match="unreachable"):
        connect(
            base_url=f"http://127.0.0.1:{_closed_port()}",
            api_key="tml-x",
            timeouts=TinkerTimeouts(reachability_s=2.0),
        )


def test_a_server_that_drips_its_answer_is_unreachable_within_the_deadline():
    # Each byte arrives well within httpx's per-read timeout; only a whole-request deadline stops it.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        stop = threading.Event()

        def drip() -> None:
            connection, _ = server.accept()
            with connection:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 600:
                    if stop.wait(0.1):
                        return
                    connection.sendall(bytes([byte]))

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:
            with pytest.raises(TransportError, match=r"no complete answer within timeout_s=1 \(a deadline"):
                connect(
                    base_url=f"http://127.0.0.1:{port}",
                    api_key="tml-x",
                    timeouts=TinkerTimeouts(reachability_s=1.0),
                )
            # connect gave up while the answer was still dripping (it takes 60 s in all).
            assert dripper.is_alive()
        finally:
            stop.set()


def test_timeouts_must_be_positive():
    with pytest.raises(ConfigError, match="train_s"):
        TinkerTimeouts(train_s=0)


_STALLED_SERVICE_SCRIPT = """
import asyncio, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ludic_core.errors import LudicTimeoutError
from ludic_tinker import TinkerTimeouts, connect
from ludic_tinker.session import create_training_client


class Stalled(BaseHTTPRequestHandler):
    # Answers the reachability probe, then never answers anything else (a wedged service).
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.endswith("/healthz"):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        else:
            time.sleep(3600)

    do_POST = do_GET


server = ThreadingHTTPServer(("127.0.0.1", 0), Stalled)
server.daemon_threads = True
threading.Thread(target=server.serve_forever, daemon=True).start()
timeouts = TinkerTimeouts(create_client_s=1.0)


async def main():
    service = connect(base_url=f"http://127.0.0.1:{server.server_address[1]}", api_key="tml-x", timeouts=timeouts)
    try:
        await create_training_client(service, "Qwen/Qwen3-0.6B", timeouts=timeouts)
    except LudicTimeoutError as exc:
        print("timed out:", exc)


asyncio.run(main())
"""


def test_the_process_exits_promptly_after_a_client_creation_timeout():
    # The SDK keeps retrying in the abandoned worker thread; a non-daemon thread kept the process
    # alive for minutes after the timeout had already been reported.
    # Kept alive by the abandoned thread, the process would run for minutes: past run()'s limit.
    done = subprocess.run(
        [sys.executable, "-c", _STALLED_SERVICE_SCRIPT], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "timed out: waited 1 s for Tinker create_lora_training_client" in done.stdout
