"""The weight-update state machine of one API server process, independent of HTTP.

:class:`UpdateService` owns the policy version and serialises everything that changes weights behind
one lock. An update is: pause generation → receive/load on every worker → set the version → reset the
prefix cache → resume; the call returns only once the new weights are live, and the version changes
nowhere else. Updates are idempotent by update id and versions only increase (unless forced).

It talks to vLLM only through the engine client's stable surface (``collective_rpc``,
``pause_generation``/``resume_generation``/``is_paused``, ``reset_prefix_cache``, ``check_health``) via
:mod:`ludic_vllm._compat`, so the unit tests drive it with a fake engine and the ``vllm`` tests with
the real one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError
from ludic_core.logs import get_logger
from ludic_core.validation import check_int, check_number
from ludic_vllm import _compat
from ludic_vllm.update_wire import DEFAULT_BUCKET_BYTES, PAUSE_MODES, TRANSPORTS, Manifest

__all__ = ["ConflictError", "UpdateService"]

log = get_logger("ludic_vllm.service")

_APPLIED_MEMORY = 1024  # update ids remembered for idempotency


class ConflictError(ConfigError):
    """The request is well-formed but conflicts with the server's state (HTTP 409)."""


def _req(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in body:
        raise ConfigError(f"{what}: field {key!r} is required; got keys {sorted(body)}")
    value = body[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConfigError(f"{what}: field {key!r} has the wrong type: {value!r}")
    if not isinstance(value, kind):
        raise ConfigError(f"{what}: field {key!r} has the wrong type: {value!r}")
    return value


def _version(body: Mapping[str, Any], what: str) -> int:
    value = _req(body, "version", int, what)
    if value < 0:
        raise ConfigError(f"{what}: version must be >= 0, got {value}")
    return int(value)


def _pause_mode(body: Mapping[str, Any], what: str) -> str:
    mode = body.get("pause_mode", "keep")
    if mode not in PAUSE_MODES:
        raise ConfigError(f"{what}: pause_mode must be one of {sorted(PAUSE_MODES)}, got {mode!r}")
    return str(mode)


def _timeout(body: Mapping[str, Any], what: str, default: float) -> float:
    value = body.get("timeout_s", default)
    return float(check_number(f"{what}: timeout_s", value, minimum=0, exclusive=True))


@attrs.define
class UpdateService:
    """Version, lock and update flow for one API server process (one per ``app``)."""

    engine: Any
    version: int = 0
    update_id: str | None = None
    updated_at: float | None = None
    updating: bool = False
    transport: dict[str, Any] | None = None
    rpc_timeout_s: float = 900.0
    load_dirs: tuple[str, ...] = ()
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    _idle: asyncio.Event = attrs.field(factory=asyncio.Event)
    _applied: collections.OrderedDict[str, int] = attrs.field(factory=collections.OrderedDict)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    # -- reads ------------------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait while an update is in progress (new generation requests start on the new version)."""
        await self._idle.wait()

    async def health(self) -> tuple[int, dict[str, Any]]:
        status = "ok"
        code = 200
        try:
            await self.engine.check_health()
        except Exception as exc:  # the engine reports death through any exception type
            status, code = f"dead: {type(exc).__name__}: {exc}", 503
        paused = await _compat.is_paused(self.engine) if code == 200 else None
        return code, {
            "status": status,
            "policy_version": self.version,
            "paused": bool(paused),
            "updating": self.updating,
            "vllm_version": _compat.vllm_version(),
            "world_size": _compat.world_size(self.engine),
            "transport": None if self.transport is None else self.transport["transport"],
        }

    def version_info(self) -> dict[str, Any]:
        return {"policy_version": self.version, "update_id": self.update_id, "updated_at": self.updated_at}

    def update_status(self, update_id: str) -> dict[str, Any]:
        version = self._applied.get(update_id)
        return {"update_id": update_id, "applied": version is not None, "version": version}

    # -- transport --------------------------------------------------------------------------------

    async def init_transport(self, body: Mapping[str, Any]) -> dict[str, Any]:
        what = "/ludic/transport/init"
        transport = _req(body, "transport", str, what)
        if transport not in TRANSPORTS:
            raise ConfigError(f"{what}: transport must be one of {sorted(TRANSPORTS)}, got {transport!r}")
        master_address = _req(body, "master_address", str, what)
        master_port = _req(body, "master_port", int, what)
        rank_offset = _req(body, "rank_offset", int, what)
        world_size = _req(body, "world_size", int, what)
        timeout_s = _timeout(body, what, 300.0)
        workers = _compat.world_size(self.engine)
        if rank_offset < 1 or rank_offset + workers > world_size:
            raise ConfigError(
                f"{what}: ranks {rank_offset}..{rank_offset + workers - 1} of this server's {workers} workers "
                f"do not fit world_size={world_size} with the trainer at rank 0"
            )
        async with self._lock:
            if self.transport is not None:
                raise ConflictError(
                    f"{what}: a {self.transport['transport']} transport is already open; close it first"
                )
            ranks = await self._rpc(
                "ludic_init_transport",
                (transport, master_address, master_port, rank_offset, world_size, timeout_s),
                timeout_s + 30.0,
                what,
            )
            self.transport = {"transport": transport, "world_size": world_size, "ranks": list(ranks)}
        log.info("transport open", transport=transport, ranks=list(ranks), world_size=world_size)
        return {"ok": True, "ranks": list(ranks)}

    async def close_transport(self) -> dict[str, Any]:
        async with self._lock:
            closed = await self._rpc("ludic_close_transport", (), 60.0, "/ludic/transport/close")
            self.transport = None
        return {"ok": True, "closed": any(closed)}

    # -- updates ----------------------------------------------------------------------------------

    def _duplicate(self, update_id: str) -> dict[str, Any] | None:
        if update_id in self._applied:
            return {
                "ok": True,
                "update_id": update_id,
                "version": self._applied[update_id],
                "duplicate": True,
                "took_s": 0.0,
            }
        return None

    async def _rpc(self, method: str, args: tuple[Any, ...], timeout_s: float, what: str) -> list[Any]:
        try:
            result = await self.engine.collective_rpc(method, timeout=timeout_s, args=args)
        except TimeoutError as exc:
            raise LudicTimeoutError(
                f"{what}: workers did not finish {method} within {timeout_s:.0f}s"
            ) from exc
        return list(result)

    async def _apply(
        self,
        body: Mapping[str, Any],
        *,
        what: str,
        load: Callable[[], Awaitable[Any]],
        check: Callable[[], None] = lambda: None,
        update_id: str | None = None,
    ) -> dict[str, Any]:
        """Apply the update ``body`` asks for (``update_id`` unless given, ``version``, ``pause_mode``,
        ``force``): ``load`` the weights with generation paused, then make ``version`` live."""
        update_id = update_id or _req(body, "update_id", str, what)
        version = _version(body, what)
        pause_mode = _pause_mode(body, what)
        force = bool(body.get("force", False))
        dup = self._duplicate(update_id)
        if dup is not None:
            return dup
        async with self._lock:
            dup = self._duplicate(update_id)
            if dup is not None:
                return dup
            if version <= self.version and not force:
                raise ConflictError(
                    f"{what}: version {version} does not increase the live version {self.version} "
                    "(pass force=true to roll back on purpose)"
                )
            check()
            started = time.monotonic()
            self.updating = True
            self._idle.clear()
            paused = False
            try:
                paused = await _compat.pause_generation(self.engine, pause_mode)
                details = await load()
                await self._rpc("ludic_set_version", (version,), 60.0, what)
                self.version = version
                self.update_id = update_id
                self.updated_at = time.time()
                self._applied[update_id] = version
                while len(self._applied) > _APPLIED_MEMORY:
                    self._applied.popitem(last=False)
                # KV computed under the old weights must not be reused. This fails (False) while frozen
                # requests hold blocks; those requests are tagged mixed-version anyway.
                reset = await self.engine.reset_prefix_cache()
                set_weight_version = getattr(self.engine, "update_weight_version", None)
                if set_weight_version is not None:
                    await set_weight_version(str(version))
            finally:
                if paused:
                    await _compat.resume_generation(self.engine)
                self.updating = False
                self._idle.set()
        took = time.monotonic() - started
        log.info("update applied", what=what, version=version, update_id=update_id, took_s=round(took, 3))
        return {
            "ok": True,
            "update_id": update_id,
            "version": version,
            "duplicate": False,
            "took_s": took,
            "prefix_cache_reset": bool(reset),
            "details": details,
        }

    async def update(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Broadcast update: the trainer sends the tensors over the open transport while this runs."""
        what = "/ludic/update"
        _req(body, "update_id", str, what)  # the request's own fields are named before its manifest is judged
        _version(body, what)
        manifest = Manifest.from_json(_req(body, "manifest", list, what))
        checksum = _req(body, "manifest_checksum", str, what)
        if checksum != manifest.checksum:
            raise DataError(
                f"{what}: manifest_checksum {checksum} does not match the manifest ({manifest.checksum})"
            )
        bucket_bytes = body.get("bucket_bytes", DEFAULT_BUCKET_BYTES)
        check_int(f"{what}: bucket_bytes", bucket_bytes, 1)
        _pause_mode(body, what)
        timeout_s = _timeout(body, what, self.rpc_timeout_s)

        def check() -> None:
            if self.transport is None:
                raise ConflictError(f"{what}: no weight transport is open; call /ludic/transport/init first")

        async def load() -> Any:
            try:
                return await self._rpc(
                    "ludic_receive", (manifest.to_json(), manifest.checksum, bucket_bytes), timeout_s, what
                )
            except BaseException:
                # The workers dropped their channel (it is out of step with the trainer).
                self.transport = None
                raise

        return await self._apply(body, what=what, load=load, check=check)

    def _allowed_path(self, path: str, what: str) -> str:
        """``path`` resolved (symlinks included), if it and every file a load reads in it lie inside
        one of ``load_dirs``.

        A caller that may change weights must still not make the server read arbitrary files: loads
        from a server path are confined to the directories the operator named at start-up. A directory
        inside them may still hold a symlink to a file outside (``model.safetensors -> /etc/shadow``),
        so each file of a directory is resolved too.
        """
        if not self.load_dirs:
            raise ConfigError(
                f"{what}: loading from a path on the server is disabled; start the server with "
                "--ludic-load-dir DIR (LUDIC_VLLM_LOAD_DIRS) naming the directories it may load from, "
                "or upload the weights (update_from_bytes)"
            )
        if not path or "\x00" in path:
            raise ConfigError(
                f"{what}: path {path!r} is not a file system path (empty or holding a NUL byte)"
            )
        resolved = self._inside_load_dirs(path, what)
        if os.path.isdir(resolved):
            with os.scandir(resolved) as entries:
                for entry in entries:
                    if entry.is_file():  # follows links; loads read the files of a directory, not below
                        self._inside_load_dirs(entry.path, what)
        return resolved

    def _inside_load_dirs(self, path: str, what: str) -> str:
        resolved = os.path.realpath(path)
        for root in self.load_dirs:
            real_root = os.path.realpath(root)
            if os.path.commonpath([resolved, real_root]) == real_root:
                return resolved
        raise ConfigError(
            f"{what}: path {path!r} (resolved to {resolved!r}) is outside the server's load directories "
            f"{list(self.load_dirs)}"
        )

    async def update_from_path(self, body: Mapping[str, Any]) -> dict[str, Any]:
        what = "/ludic/update_from_path"
        _req(body, "update_id", str, what)  # the request's own fields are named before its path is judged
        _version(body, what)
        path = self._allowed_path(_req(body, "path", str, what), what)
        return await self._update_from_dir(body, path, what)

    async def _update_from_dir(self, body: Mapping[str, Any], path: str, what: str) -> dict[str, Any]:
        _pause_mode(body, what)
        if not await asyncio.to_thread(os.path.exists, path):
            raise DataError(f"{what}: path {path!r} does not exist on the server's host")

        async def load() -> Any:
            return await self._rpc("ludic_load_path", (path,), self.rpc_timeout_s, what)

        return await self._apply(body, what=what, load=load)

    async def update_from_bytes(self, payload: bytes, params: Mapping[str, str]) -> dict[str, Any]:
        what = "/ludic/update_from_bytes"
        update_id = params.get("update_id")
        if not update_id:
            raise ConfigError(f"{what}: query parameter 'update_id' is required")
        try:
            version = int(params.get("version", ""))
        except ValueError as exc:
            raise ConfigError(
                f"{what}: query parameter 'version' must be an int, got {params.get('version')!r}"
            ) from exc
        if not payload:
            raise DataError(f"{what}: the request body is empty; expected safetensors bytes")
        dup = self._duplicate(update_id)
        if dup is not None:
            return dup
        tmp = tempfile.mkdtemp(prefix="ludic-upload-")
        try:
            await asyncio.to_thread(Path(tmp, "model.safetensors").write_bytes, payload)
            # The server wrote this directory itself: no load-directory check.
            return await self._update_from_dir(
                {
                    "update_id": update_id,
                    "version": version,
                    "pause_mode": params.get("pause_mode", "keep"),
                    "force": params.get("force", "false").lower() == "true",
                },
                tmp,
                what,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def load_lora(self, app_state: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        """Load or replace a LoRA adapter; with ``version``, it becomes the live policy version."""
        what = "/ludic/lora/load"
        name = _req(body, "name", str, what)
        path = self._allowed_path(_req(body, "path", str, what), what)
        if not await asyncio.to_thread(os.path.isdir, path):
            raise DataError(f"{what}: adapter directory {path!r} does not exist on the server's host")
        if "version" not in body:
            async with self._lock:
                await _compat.load_lora_adapter(app_state, name=name, path=path)
            return {"ok": True, "name": name, "version": self.version}

        async def load() -> Any:
            await _compat.load_lora_adapter(app_state, name=name, path=path)
            return {"adapter": name}

        update_id = body.get("update_id") or f"lora:{name}:{body['version']}"
        return await self._apply(body, what=what, load=load, update_id=str(update_id))

    # -- generation control -----------------------------------------------------------------------

    # Pause, resume and cache resets take the update lock too: a resume landing mid-update would let
    # requests run on half-loaded weights, and a reset would race the update's own.

    @contextlib.asynccontextmanager
    async def _exclusive(self, what: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self.rpc_timeout_s):
                await self._lock.acquire()
        except TimeoutError as exc:
            raise LudicTimeoutError(
                f"{what}: a weight update held the update lock for over {self.rpc_timeout_s:g}s"
            ) from exc
        try:
            yield
        finally:
            self._lock.release()

    async def pause(self, body: Mapping[str, Any]) -> dict[str, Any]:
        mode = body.get("mode", "keep")
        if mode not in PAUSE_MODES:
            raise ConfigError(f"/ludic/pause: mode must be one of {sorted(PAUSE_MODES)}, got {mode!r}")
        async with self._exclusive("/ludic/pause"):
            if not await _compat.pause_generation(self.engine, str(mode)):
                raise ConfigError(f"/ludic/pause: vLLM {_compat.vllm_version()} cannot pause generation")
        return {"ok": True, "paused": True, "mode": mode}

    async def resume(self) -> dict[str, Any]:
        async with self._exclusive("/ludic/resume"):
            await _compat.resume_generation(self.engine)
        return {"ok": True, "paused": False}

    async def is_paused(self) -> dict[str, Any]:
        return {"paused": bool(await _compat.is_paused(self.engine))}

    async def reset_prefix_cache(self) -> dict[str, Any]:
        async with self._exclusive("/ludic/reset_prefix_cache"):
            return {"success": bool(await self.engine.reset_prefix_cache())}
