"""Publish weights as safetensors files: to a directory the servers can read (``mode="path"``, e.g. a
shared filesystem), or uploaded in the request body (``mode="upload"``, for small models and hosts
without shared storage). Also the route for LoRA adapters (:meth:`FilePublisher.publish_adapter`).

A step is written to ``<dir>/step_<v>.tmp/``, fsynced, and renamed to ``<dir>/step_<v>/`` before any
server is told about it, so a server never reads a half-written checkpoint. Old steps are pruned.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ludic_core.durable_files import fsync_dir
from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError, missing_extra
from ludic_core.logs import get_logger
from ludic_vllm.control import ServerControl, UpdateResult
from ludic_vllm.publisher.base import DEFAULT_PUBLISH_SETTINGS, PublisherBase, PublishSettings

__all__ = ["FilePublisher"]

log = get_logger("ludic_vllm.publisher")


def _cpu_contiguous(tensors: Mapping[str, Any]) -> dict[str, Any]:
    return {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}


class FilePublisher(PublisherBase):
    """Trainer side of a file-based update (structurally a ludic-train ``PolicyPublisher``)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        directory: str | os.PathLike[str] | None = None,
        *,
        mode: Literal["path", "upload"] = "path",
        keep_last: int = 2,
        settings: PublishSettings = DEFAULT_PUBLISH_SETTINGS,
    ) -> None:
        super().__init__(servers, settings)
        if mode not in ("path", "upload"):
            raise ConfigError(f"FilePublisher.mode must be 'path' or 'upload', got {mode!r}")
        if mode == "path" and directory is None:
            raise ConfigError("FilePublisher(mode='path') needs a directory the servers can read")
        if keep_last < 1:
            raise ConfigError(f"FilePublisher.keep_last must be >= 1, got {keep_last!r}")
        self.mode = mode
        self.directory = None if directory is None else Path(directory)
        self.keep_last = keep_last

    # -- writing ----------------------------------------------------------------------------------

    def _write_step(self, name: str, files: Mapping[str, Any]) -> Path:
        """Write ``files`` (file name → tensors dict or JSON-able dict) atomically as ``<dir>/<name>``."""
        from safetensors.torch import save_file

        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / name
        tmp = self.directory / f"{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for file_name, content in files.items():
            path = tmp / file_name
            if file_name.endswith(".safetensors"):
                save_file(content, str(path))
            else:
                path.write_text(json.dumps(content))
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(self.directory)
        return final

    def _prune(self, prefix: str) -> None:
        assert self.directory is not None
        steps = []
        for p in self.directory.glob(f"{prefix}*"):
            suffix = p.name[len(prefix) :]
            if p.is_dir() and suffix.isdigit():
                steps.append((int(suffix), p))
        for _, path in sorted(steps)[: -self.keep_last]:
            shutil.rmtree(path, ignore_errors=True)

    # -- fan-out ----------------------------------------------------------------------------------

    async def _fan_out(self, version: int, what: str, call: Any) -> None:
        async def one(control: ServerControl) -> UpdateResult:
            return await asyncio.wait_for(call(control), self.settings.timeout_s)

        results = await asyncio.gather(*(one(c) for c in self.controls), return_exceptions=True)
        failures = {}
        for url, result in zip(self.servers, results, strict=True):
            if isinstance(result, BaseException):
                failures[url] = result
            elif result.version != version:
                failures[url] = DataError(f"applied version {result.version}, expected {version}")
        if failures:
            detail = "; ".join(f"{u}: {type(e).__name__}: {e}" for u, e in failures.items())
            if all(isinstance(e, TimeoutError) for e in failures.values()):
                raise LudicTimeoutError(
                    f"{what} of version {version} timed out after {self.settings.timeout_s:.0f}s: {detail}"
                )
            raise TransportError(f"{what} of version {version} failed: {detail}")
        await self.confirm(version)

    # -- publish ----------------------------------------------------------------------------------

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        """Write (or upload) ``named_tensors`` as policy ``version`` and confirm every server has it."""
        try:
            import safetensors.torch  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise missing_extra("ludic-vllm", "publisher", "safetensors") from exc
        tensors = _cpu_contiguous(self.prepare(named_tensors, version))
        update_id = self.update_id(version)
        if self.mode == "upload":
            from safetensors.torch import save

            payload = save(tensors)
            await self._fan_out(
                version,
                "upload",
                lambda c: c.update_from_bytes(
                    payload,
                    update_id=update_id,
                    version=version,
                    pause_mode=self.settings.pause_mode,
                    timeout_s=self.settings.timeout_s,
                    force=self.settings.allow_version_reset,
                ),
            )
            return
        path = await asyncio.to_thread(self._write_step, f"step_{version}", {"model.safetensors": tensors})
        await self._fan_out(
            version,
            "update from path",
            lambda c: c.update_from_path(
                update_id=update_id,
                version=version,
                path=str(path),
                pause_mode=self.settings.pause_mode,
                timeout_s=self.settings.timeout_s,
                force=self.settings.allow_version_reset,
            ),
        )
        self._prune("step_")

    async def publish_adapter(
        self,
        name: str,
        adapter_tensors: Mapping[str, Any],
        adapter_config: Mapping[str, Any],
        *,
        version: int | None = None,
    ) -> Path:
        """Write a PEFT LoRA adapter (``adapter_model.safetensors`` + ``adapter_config.json``) and load
        it on every server as ``name`` (requests select it with ``model=name``). With ``version`` it
        becomes the live policy version. Needs servers started with ``--enable-lora``."""
        if self.mode != "path":
            raise ConfigError("publish_adapter needs mode='path': vLLM loads adapters from a directory")
        if not adapter_tensors:
            raise DataError("publish_adapter: the adapter has no tensors")
        tensors = _cpu_contiguous(adapter_tensors)
        step = f"adapter_{name}_{version if version is not None else 0}"
        path = await asyncio.to_thread(
            self._write_step,
            step,
            {"adapter_model.safetensors": tensors, "adapter_config.json": dict(adapter_config)},
        )

        async def load(control: ServerControl) -> None:
            await asyncio.wait_for(
                control.load_lora(name=name, path=str(path), version=version), self.settings.timeout_s
            )

        results = await asyncio.gather(*(load(c) for c in self.controls), return_exceptions=True)
        failures = {u: r for u, r in zip(self.servers, results, strict=True) if isinstance(r, BaseException)}
        if failures:
            raise TransportError(f"loading adapter {name!r} failed on {failures}")
        if version is not None:
            await self.confirm(version)
        self._prune(f"adapter_{name}_")
        return path
