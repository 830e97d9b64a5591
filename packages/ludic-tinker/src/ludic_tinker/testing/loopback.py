"""The fake Tinker service's HTTP side: a loopback server, and a handler that routes each request to
an endpoint of the service and sends back its JSON or its :class:`Result`. An endpoint raises
:class:`Violation` for a request the real service would reject: it is answered 400 and recorded."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

if TYPE_CHECKING:
    from ludic_tinker.testing.server import FakeTinkerService


class Violation(Exception):
    """Something a client sent that the real service would reject or misread."""


@attrs.frozen
class Result:
    """A response body sent as it is, with its content type (protobuf for sample and
    forward-backward results)."""

    body: bytes
    content_type: str


class LoopbackServer(ThreadingHTTPServer):
    """The fake's HTTP server: a thread per connection, and a listen backlog the SDK's bursts fit in.

    ``socketserver``'s default backlog is 5. A GRPO step samples a group at once, and each request in
    flight holds a connection of its own (keep-alive reuses only the idle ones), so a burst opens many
    connections together. On a busy machine the accepting thread falls behind, and past the backlog
    the kernel drops connection attempts: each costs the client a second or more, and one not made
    within the SDK's 5 s connect timeout makes the SDK send its request again.

    The SDK keeps its HTTP connections open: :meth:`close_connections` ends them, so that no handler
    thread is left reading a socket when the interpreter shuts down (a daemon thread alive at shutdown
    can abort the process).
    """

    request_queue_size = socket.SOMAXCONN
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[LoopbackHandler]) -> None:
        super().__init__(address, handler)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def close_connections(self) -> None:
        with self.connections_lock:
            connections, self.connections = self.connections, set()
        for connection in connections:
            # The handler's read returns and its thread ends (OSError: the client closed it already).
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class LoopbackHandler(BaseHTTPRequestHandler):
    """Routes each request to ``fake``'s endpoint: ``POST /api/v1/forward_backward`` (a protobuf body)
    to :meth:`~ludic_tinker.testing.server.FakeTinkerService.forward_backward`, the JSON ones through
    ``routes`` (path -> endpoint); the service subclasses it with both set."""

    protocol_version = "HTTP/1.1"
    server: LoopbackServer
    fake: FakeTinkerService
    routes: ClassVar[Mapping[str, Callable[[FakeTinkerService, dict[str, Any]], Any]]]

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompress(body)
        return body

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.fake.endpoint_counts[path] = self.fake.endpoint_counts.get(path, 0) + 1
        if path.startswith("/api/v1/samplers/"):
            sampler_id = path.rsplit("/", 1)[1]
            entry = self.fake._samplers.get(sampler_id)
            if entry is None:
                self._send(404, b'{"detail": "unknown sampler"}')
                return
            body = {"sampler_id": sampler_id, "base_model": entry[0], "model_path": None}
            self._send(200, json.dumps(body).encode())
            return
        if path == "/api/v1/healthz":
            self._send(200, b'{"status": "ok"}')
            return
        self._send(404, json.dumps({"detail": f"no route GET {path}"}).encode())

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        fake = self.fake
        with fake._lock:
            fake.endpoint_counts[path] = fake.endpoint_counts.get(path, 0) + 1
        body = self._read_body()
        if not (self.headers.get("X-API-Key") or "").startswith("tml-"):
            self._send(HTTPStatus.UNAUTHORIZED, b'{"detail": "missing or invalid X-API-Key"}')
            return
        injected = fake.fail_next.pop(path, None)
        try:
            if injected is not None:
                self._send(200, json.dumps(fake._future(fake._user_error(injected))).encode())
                return
            if path == "/api/v1/forward_backward":
                self._send(200, json.dumps(fake.forward_backward(body)).encode())
                return
            if path.startswith("/api/v1/sessions/") and path.endswith("/finish"):
                self._send(200, b"null")
                return
            route = self.routes.get(path)
            if route is None:
                fake.violations.append(f"the SDK called an endpoint the fake does not serve: POST {path}")
                self._send(404, json.dumps({"detail": f"no route POST {path}"}).encode())
                return
            result = route(fake, json.loads(body or b"{}"))
            if isinstance(result, Result):
                self._send(200, result.body, result.content_type)
            else:
                self._send(200, json.dumps(result).encode())
        except Violation as exc:
            fake.violations.append(str(exc))
            self._send(400, json.dumps({"detail": str(exc)}).encode())
        except Exception as exc:  # a pydantic validation error means the client sent a malformed request
            fake.violations.append(f"POST {path}: {type(exc).__name__}: {exc}")
            self._send(400, json.dumps({"detail": f"{type(exc).__name__}: {exc}"}).encode())
