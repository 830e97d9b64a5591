"""What every publisher shares: the server list, version confirmation, and failure reporting.

A publish is manifest → transfer → confirmation: after the transfer each server must report the new
version on ``/ludic/version``. Any timeout or mismatch raises with what was being waited for; nothing
waits without a deadline.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError
from ludic_core.logs import get_logger
from ludic_core.validation import check_int
from ludic_vllm.control import ServerControl
from ludic_vllm.names import normalize_names

__all__ = ["PublisherBase"]

log = get_logger("ludic_vllm.publisher")


def _server_list(servers: str | Sequence[str]) -> list[str]:
    urls = [servers] if isinstance(servers, str) else list(servers)
    if not urls:
        raise ConfigError("a publisher needs at least one server URL")
    return [u.rstrip("/") for u in urls]


class PublisherBase:
    """Common state for the publishers (structurally a ludic-train ``PolicyPublisher``)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        api_token: str | None = None,
        timeout_s: float = 600.0,
        pause_mode: str = "keep",
        lora: Literal["error", "drop"] = "error",
        run_id: str | None = None,
        allow_version_reset: bool = False,
    ) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.servers = _server_list(servers)
        self.timeout_s = float(timeout_s)
        self.pause_mode = pause_mode
        self.lora = lora
        self.run_id = run_id or uuid.uuid4().hex[:12]
        # A new run that restarts its step count against a long-lived server must say so: otherwise a
        # version that does not increase is refused (it usually means two trainers share a server).
        self.allow_version_reset = allow_version_reset
        self.controls = [
            ServerControl(url, api_token=api_token, timeout_s=min(60.0, timeout_s)) for url in self.servers
        ]
        self.last_version: int | None = None

    def update_id(self, version: int) -> str:
        return f"{self.run_id}-v{version}"

    def prepare(self, named_tensors: Mapping[str, Any], version: int) -> dict[str, Any]:
        check_int("version", version, 0)
        tensors = normalize_names(named_tensors, lora=self.lora)
        if not tensors:
            raise DataError("nothing to publish: the state dict is empty")
        return tensors

    async def confirm(self, version: int, *, timeout_s: float = 30.0) -> None:
        """Every server must now report ``version``; raise naming the servers that do not."""

        async def one(control: ServerControl) -> tuple[str, int | BaseException]:
            try:
                return control.base_url, await asyncio.wait_for(control.version(), timeout_s)
            except (TransportError, TimeoutError, LudicTimeoutError) as exc:
                return control.base_url, exc

        results = await asyncio.gather(*(one(c) for c in self.controls))
        wrong = {url: v for url, v in results if v != version}
        if wrong:
            raise DataError(f"after publishing version {version}, servers report {wrong} instead")
        self.last_version = version

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.controls))
