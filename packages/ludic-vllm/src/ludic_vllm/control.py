"""Control-plane client for one Ludic vLLM server: the ``/ludic/*`` routes.

Used by :class:`~ludic_vllm.client.VLLMClient` (health, version, pause/resume) and by the publishers
(transport set-up, updates). Only idempotent calls are retried (health, version, world size, pause,
resume, prefix-cache reset, update status); an update is never blindly re-sent — a caller that lost the
answer asks :meth:`ServerControl.update_status` by update id.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import aiohttp
import attrs

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError
from ludic_core.logs import get_logger
from ludic_core.validation import check_int
from ludic_vllm._http import RetryPolicy, SessionHolder, error_for_status, retry_transient, with_deadline
from ludic_vllm.errors import ServerError, UpdateRejectedError
from ludic_vllm.update_wire import PAUSE_MODES, TRANSPORTS, Manifest

__all__ = ["ServerControl", "ServerHealth", "UpdateResult"]

log = get_logger("ludic_vllm.control")


@attrs.frozen
class ServerHealth:
    """What ``GET /ludic/health`` reports."""

    status: str
    policy_version: int
    paused: bool
    updating: bool
    vllm_version: str
    world_size: int
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)


@attrs.frozen
class UpdateResult:
    """The server's answer to an update: the version now live and whether this call applied it
    (``duplicate`` is true when the update id had already been applied)."""

    version: int
    update_id: str
    duplicate: bool
    took_s: float


def _int_field(data: dict[str, Any], key: str, url: str) -> int:
    return check_int(f"{url} answered {data!r}: {key!r}", data.get(key), error=DataError)


class ServerControl:
    """Async client for the ``/ludic/*`` routes of one server.

    ``api_token`` is sent as a bearer token (required by weight-changing routes when the server has one
    configured; without one they accept loopback callers only).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_token: str | None = None,
        connect_timeout_s: float = 10.0,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        seed: int | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"ServerControl.base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._token = api_token
        self._connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self._retry = retry or RetryPolicy(max_attempts=4, deadline_s=60.0)
        self._rng = random.Random(seed)
        self._sessions = SessionHolder(self._new_session)

    def _new_session(self) -> aiohttp.ClientSession:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        connector = aiohttp.TCPConnector(limit=8, keepalive_timeout=3.0, enable_cleanup_closed=True)
        return aiohttp.ClientSession(connector=connector, headers=headers)

    async def aclose(self) -> None:
        await self._sessions.aclose()

    async def __aenter__(self) -> ServerControl:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing ---------------------------------------------------------------------------------

    async def _request_once(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        params: dict[str, str] | None = None,
        timeout_s: float | None,
        rejected: type[ServerError],
    ) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        deadline_s = timeout_s or self.timeout_s
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._connect_timeout_s, sock_read=deadline_s
        )
        headers = {"Content-Type": "application/octet-stream"} if data is not None else None
        status, body = await with_deadline(
            lambda: self._send(method, url, json_body, data, params, timeout, headers),
            deadline_s=deadline_s,
            what=f"{method} {url}",
            setting="timeout_s",
        )
        if status >= 400:
            raise error_for_status(status, body, url, rejected=rejected)
        try:
            parsed = json.loads(body) if body else {}
        except ValueError as exc:
            raise DataError(f"{url} answered HTTP {status} with non-JSON body: {body[:500]!r}") from exc
        if not isinstance(parsed, dict):
            raise DataError(f"{url} answered with a JSON {type(parsed).__name__}, expected an object")
        return parsed

    async def _send(
        self,
        method: str,
        url: str,
        json_body: Any,
        data: bytes | None,
        params: dict[str, str] | None,
        timeout: aiohttp.ClientTimeout,
        headers: dict[str, str] | None,
    ) -> tuple[int, str]:
        async with self._sessions.get().request(
            method, url, json=json_body, data=data, params=params, timeout=timeout, headers=headers
        ) as resp:
            return resp.status, await resp.text()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        params: dict[str, str] | None = None,
        timeout_s: float | None = None,
        idempotent: bool,
        rejected: type[ServerError] = UpdateRejectedError,
    ) -> dict[str, Any]:
        what = f"{method} {self.base_url}{path}"

        async def once() -> dict[str, Any]:
            return await self._request_once(
                method,
                path,
                json_body=json_body,
                data=data,
                params=params,
                timeout_s=timeout_s,
                rejected=rejected,
            )

        if idempotent:
            return await retry_transient(once, policy=self._retry, rng=self._rng, what=what)
        try:
            return await once()
        except LudicTimeoutError:
            raise
        except aiohttp.SocketTimeoutError as exc:
            raise LudicTimeoutError(f"{what}: no answer within {timeout_s or self.timeout_s:.1f}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    # -- read-only --------------------------------------------------------------------------------

    async def health(self, *, timeout_s: float | None = None) -> ServerHealth:
        data = await self._call("GET", "/ludic/health", timeout_s=timeout_s, idempotent=False)
        url = f"{self.base_url}/ludic/health"
        return ServerHealth(
            status=str(data.get("status")),
            policy_version=_int_field(data, "policy_version", url),
            paused=bool(data.get("paused")),
            updating=bool(data.get("updating")),
            vllm_version=str(data.get("vllm_version")),
            world_size=_int_field(data, "world_size", url),
            raw=data,
        )

    async def wait_until_ready(self, timeout_s: float = 300.0, *, poll_s: float = 0.5) -> ServerHealth:
        """Poll ``/ludic/health`` until the server answers ``status == "ok"``; raise
        :class:`LudicTimeoutError` with the last error after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: str = "no attempt"
        while True:
            remaining = deadline - time.monotonic()
            try:
                health = await self.health(timeout_s=max(1.0, min(10.0, remaining)))
                if health.status == "ok":
                    return health
                last = f"status={health.status!r}"
            except (TransportError, ServerError, DataError, LudicTimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + poll_s > deadline:
                raise LudicTimeoutError(
                    f"server {self.base_url} was not ready within {timeout_s:.1f}s (last: {last})"
                )
            await asyncio.sleep(poll_s)

    async def version(self) -> int:
        data = await self._call("GET", "/ludic/version", idempotent=True)
        return _int_field(data, "policy_version", f"{self.base_url}/ludic/version")

    async def world_size(self) -> int:
        data = await self._call("GET", "/ludic/world_size", idempotent=True)
        return _int_field(data, "world_size", f"{self.base_url}/ludic/world_size")

    async def update_status(self, update_id: str) -> int | None:
        """The version an update id produced, or None if the server has not applied it."""
        data = await self._call("GET", "/ludic/updates", params={"update_id": update_id}, idempotent=True)
        if not data.get("applied"):
            return None
        return _int_field(data, "version", f"{self.base_url}/ludic/updates")

    async def is_paused(self) -> bool:
        data = await self._call("GET", "/ludic/is_paused", idempotent=True)
        return bool(data.get("paused"))

    # -- generation control -----------------------------------------------------------------------

    async def pause(self, mode: str = "keep", *, timeout_s: float = 300.0) -> None:
        if mode not in PAUSE_MODES:
            raise ConfigError(f"pause mode must be one of {sorted(PAUSE_MODES)}, got {mode!r}")
        await self._call(
            "POST", "/ludic/pause", json_body={"mode": mode}, timeout_s=timeout_s, idempotent=True
        )

    async def resume(self) -> None:
        await self._call("POST", "/ludic/resume", json_body={}, idempotent=True)

    async def reset_prefix_cache(self) -> bool:
        data = await self._call("POST", "/ludic/reset_prefix_cache", json_body={}, idempotent=True)
        return bool(data.get("success"))

    # -- weights ----------------------------------------------------------------------------------

    async def init_transport(
        self,
        *,
        transport: str,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        timeout_s: float,
    ) -> None:
        """Ask every worker to join the trainer's group. Blocks until the rendezvous completes, so run
        it concurrently with the trainer's own group creation."""
        if transport not in TRANSPORTS:
            raise ConfigError(f"transport must be one of {sorted(TRANSPORTS)}, got {transport!r}")
        body = {
            "transport": transport,
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "timeout_s": timeout_s,
        }
        await self._call(
            "POST", "/ludic/transport/init", json_body=body, timeout_s=timeout_s + 30.0, idempotent=False
        )

    async def close_transport(self, *, timeout_s: float = 60.0) -> None:
        await self._call("POST", "/ludic/transport/close", json_body={}, timeout_s=timeout_s, idempotent=True)

    async def _apply_update(self, route: str, *, timeout_s: float, **request: Any) -> UpdateResult:
        """One weight-changing ``POST``; every update route answers with the same result fields."""
        started = time.monotonic()
        data = await self._call("POST", route, timeout_s=timeout_s, idempotent=False, **request)
        url = f"{self.base_url}{route}"
        return UpdateResult(
            version=_int_field(data, "version", url),
            update_id=str(data.get("update_id")),
            duplicate=bool(data.get("duplicate")),
            took_s=time.monotonic() - started,
        )

    async def update(
        self,
        *,
        update_id: str,
        version: int,
        manifest: Manifest,
        bucket_bytes: int,
        pause_mode: str = "keep",
        timeout_s: float = 900.0,
        force: bool = False,
    ) -> UpdateResult:
        """``POST /ludic/update``: returns once the workers have received and applied every tensor."""
        body = {
            "update_id": update_id,
            "version": version,
            "manifest": manifest.to_json(),
            "manifest_checksum": manifest.checksum,
            "bucket_bytes": bucket_bytes,
            "pause_mode": pause_mode,
            "timeout_s": timeout_s,
            "force": force,
        }
        return await self._apply_update("/ludic/update", json_body=body, timeout_s=timeout_s + 30.0)

    async def update_from_path(
        self,
        *,
        update_id: str,
        version: int,
        path: str,
        pause_mode: str = "keep",
        timeout_s: float = 900.0,
        force: bool = False,
    ) -> UpdateResult:
        body = {
            "update_id": update_id,
            "version": version,
            "path": path,
            "pause_mode": pause_mode,
            "force": force,
        }
        return await self._apply_update("/ludic/update_from_path", json_body=body, timeout_s=timeout_s)

    async def update_from_bytes(
        self,
        payload: bytes,
        *,
        update_id: str,
        version: int,
        pause_mode: str = "keep",
        timeout_s: float = 900.0,
        force: bool = False,
    ) -> UpdateResult:
        params = {"update_id": update_id, "version": str(version), "pause_mode": pause_mode}
        if force:
            params["force"] = "true"
        return await self._apply_update(
            "/ludic/update_from_bytes", data=payload, params=params, timeout_s=timeout_s
        )

    async def load_lora(
        self, *, name: str, path: str, version: int | None = None, timeout_s: float = 300.0
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "path": path}
        if version is not None:
            body["version"] = version
        return await self._call(
            "POST", "/ludic/lora/load", json_body=body, timeout_s=timeout_s, idempotent=False
        )
