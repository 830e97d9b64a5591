"""``--middleware ludic_vllm.routes.LudicRoutes``: the ``/ludic/*`` routes as a pure-ASGI middleware.

A middleware adds routes without forking vLLM's ``run_server`` or monkeypatching; it reaches the engine
through ``scope["app"].state.engine_client``. It also stamps every ``/v1/*`` response with the policy
version at arrival and at response time, and holds new generation requests while an update is applied.
Weight-changing routes need ``Authorization: Bearer <token>`` (``LUDIC_VLLM_API_TOKEN``); without a
token they are refused unless loopback callers are trusted (``LUDIC_VLLM_TRUST_LOOPBACK=1``, a server
bound to loopback), and a request carrying proxy headers (``Forwarded``, ``X-Forwarded-For``, …) is
refused anyway. Loads from a server path are confined to ``LUDIC_VLLM_LOAD_DIRS``.
"""

from __future__ import annotations

import hmac
import json
import os
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError
from ludic_core.logs import get_logger
from ludic_vllm._net import is_loopback
from ludic_vllm.service import ConflictError, UpdateService
from ludic_vllm.update_wire import HEADER_POLICY_VERSION, HEADER_POLICY_VERSION_START, ROUTE_PREFIX

__all__ = [
    "ENV_API_TOKEN",
    "ENV_INITIAL_VERSION",
    "ENV_LOAD_DIRS",
    "ENV_TRUST_LOOPBACK",
    "FORWARDING_HEADERS",
    "LudicRoutes",
]

log = get_logger("ludic_vllm.routes")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ENV_API_TOKEN = "LUDIC_VLLM_API_TOKEN"
ENV_INITIAL_VERSION = "LUDIC_VLLM_INITIAL_VERSION"
ENV_TRUST_LOOPBACK = "LUDIC_VLLM_TRUST_LOOPBACK"
ENV_LOAD_DIRS = "LUDIC_VLLM_LOAD_DIRS"
"""Directories (``os.pathsep``-separated) the server may load weights and adapters from."""

# Routes that change weights or generation state: loopback-only unless a token is configured.
PROTECTED = frozenset(
    {
        "/ludic/transport/init",
        "/ludic/transport/close",
        "/ludic/update",
        "/ludic/update_from_path",
        "/ludic/update_from_bytes",
        "/ludic/pause",
        "/ludic/resume",
        "/ludic/reset_prefix_cache",
        "/ludic/lora/load",
    }
)
GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
MAX_UPLOAD_BYTES = 8 * 2**30


# Headers a proxy adds: a request carrying one came through a proxy, so its loopback peer address says
# nothing about the real caller (a reverse proxy or sidecar on the same host forwards remote traffic).
FORWARDING_HEADERS = frozenset(
    {
        b"forwarded",  # RFC 7239
        b"via",  # RFC 9110: every HTTP proxy may add it
        b"x-forwarded-for",
        b"x-forwarded-host",
        b"x-forwarded-proto",
        b"x-forwarded-port",
        b"x-forwarded-server",
        b"x-original-forwarded-for",
        b"x-real-ip",
        b"x-client-ip",
        b"x-cluster-client-ip",
        b"cf-connecting-ip",  # Cloudflare
        b"true-client-ip",  # Cloudflare Enterprise, Akamai
        b"fastly-client-ip",
        b"x-envoy-external-address",
    }
)


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LudicRoutes:
    """Pure-ASGI middleware serving ``/ludic/*`` in front of vLLM's OpenAI app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._service: UpdateService | None = None
        self._token = os.environ.get(ENV_API_TOKEN) or None
        trust = os.environ.get(ENV_TRUST_LOOPBACK, "")
        if trust not in ("", "0", "1"):
            raise ConfigError(f"{ENV_TRUST_LOOPBACK} must be 0 or 1, got {trust!r}")
        self._trust_loopback = trust == "1"
        self._load_dirs = tuple(d for d in os.environ.get(ENV_LOAD_DIRS, "").split(os.pathsep) if d)
        initial = os.environ.get(ENV_INITIAL_VERSION, "0")
        try:
            self._initial_version = int(initial)
        except ValueError as exc:
            raise ConfigError(f"{ENV_INITIAL_VERSION} must be an int, got {initial!r}") from exc

    def service(self, scope: Scope) -> UpdateService:
        if self._service is None:
            engine = scope["app"].state.engine_client
            self._service = UpdateService(
                engine=engine, version=self._initial_version, load_dirs=self._load_dirs
            )
        return self._service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(ROUTE_PREFIX):
            await self._ludic(scope, receive, send)
        elif path.startswith("/v1/"):
            await self._stamped(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    # -- /v1/*: version stamps --------------------------------------------------------------------

    async def _stamped(self, scope: Scope, receive: Receive, send: Send) -> None:
        service = self.service(scope)
        if scope["path"] in GENERATION_PATHS:
            await service.wait_idle()
        start = service.version

        async def send_stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((HEADER_POLICY_VERSION_START.encode(), str(start).encode()))
                headers.append((HEADER_POLICY_VERSION.encode(), str(service.version).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_stamped)

    # -- /ludic/* ---------------------------------------------------------------------------------

    def _authorize(self, scope: Scope) -> None:
        if scope["path"] not in PROTECTED:
            return
        if self._token is not None:
            auth = ""
            for key, value in scope.get("headers", []):
                if key.lower() == b"authorization":
                    auth = value.decode("latin-1")
            expected = f"Bearer {self._token}"
            if not hmac.compare_digest(auth.encode(), expected.encode()):
                raise HttpError(401, f"{scope['path']} requires 'Authorization: Bearer <token>'")
            return
        if not self._trust_loopback:
            raise HttpError(
                403,
                f"{scope['path']} changes weights and the server has no API token: start it with "
                f"--ludic-api-token T ({ENV_API_TOKEN}), or, bound to loopback only, opt in to trusting "
                f"local callers with --ludic-trust-loopback ({ENV_TRUST_LOOPBACK}=1)",
            )
        client = scope.get("client")
        host = client[0] if client else None
        forwarded = sorted(
            key.decode("latin-1") for key, _ in scope.get("headers", []) if key.lower() in FORWARDING_HEADERS
        )
        if forwarded:
            raise HttpError(
                403,
                f"{scope['path']} changes weights; a proxied request (it carries {', '.join(forwarded)}) is "
                f"never trusted as a loopback caller; set {ENV_API_TOKEN} on the server to allow "
                "authenticated callers",
            )
        if not is_loopback(host):
            raise HttpError(
                403,
                f"{scope['path']} changes weights and accepts only loopback callers (got {host!r}); "
                f"set {ENV_API_TOKEN} on the server to allow authenticated remote callers",
            )

    @staticmethod
    async def _body(receive: Receive, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise HttpError(499, "client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise HttpError(413, f"request body exceeds {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _json(raw: bytes) -> dict[str, Any]:
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise HttpError(400, f"request body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise HttpError(400, f"request body must be a JSON object, got {type(data).__name__}")
        return data

    async def _dispatch(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        service = self.service(scope)
        path, method = scope["path"], scope["method"]
        params = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
        if method == "GET":
            if path == "/ludic/health":
                return await service.health()
            if path == "/ludic/version":
                return 200, service.version_info()
            if path == "/ludic/world_size":
                from ludic_vllm._compat import world_size

                return 200, {"world_size": world_size(service.engine)}
            if path == "/ludic/updates":
                if "update_id" not in params:
                    raise HttpError(400, "/ludic/updates needs ?update_id=")
                return 200, service.update_status(params["update_id"])
            if path == "/ludic/is_paused":
                return 200, await service.is_paused()
        elif method == "POST":
            if path == "/ludic/update_from_bytes":
                payload = await self._body(receive, MAX_UPLOAD_BYTES)
                return 200, await service.update_from_bytes(payload, params)
            body = self._json(await self._body(receive, 64 * 2**20))
            if path == "/ludic/update":
                return 200, await service.update(body)
            if path == "/ludic/update_from_path":
                return 200, await service.update_from_path(body)
            if path == "/ludic/transport/init":
                return 200, await service.init_transport(body)
            if path == "/ludic/transport/close":
                return 200, await service.close_transport()
            if path == "/ludic/pause":
                return 200, await service.pause(body)
            if path == "/ludic/resume":
                return 200, await service.resume()
            if path == "/ludic/reset_prefix_cache":
                return 200, await service.reset_prefix_cache()
            if path == "/ludic/lora/load":
                return 200, await service.load_lora(scope["app"].state, body)
        raise HttpError(404, f"no route {method} {path}")

    async def _ludic(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self._authorize(scope)
            status, payload = await self._dispatch(scope, receive)
        except HttpError as exc:
            status, payload = exc.status, {"error": {"message": str(exc), "type": "HttpError"}}
        except ConflictError as exc:
            status, payload = 409, {"error": {"message": str(exc), "type": type(exc).__name__}}
        except (ConfigError, DataError) as exc:
            status, payload = 400, {"error": {"message": str(exc), "type": type(exc).__name__}}
        except LudicTimeoutError as exc:
            status, payload = 504, {"error": {"message": str(exc), "type": type(exc).__name__}}
        except Exception as exc:
            log.error("ludic route failed", path=scope["path"], error=repr(exc), tb=traceback.format_exc())
            status, payload = (
                500,
                {"error": {"message": f"{type(exc).__name__}: {exc}", "type": type(exc).__name__}},
            )
        body = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
