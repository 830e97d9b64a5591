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

import attrs

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError
from ludic_core.logs import get_logger
from ludic_core.validation import check_int, positive_number
from ludic_vllm.control import ServerControl
from ludic_vllm.names import normalize_names

__all__ = ["PublishSettings", "PublisherBase"]

log = get_logger("ludic_vllm.publisher")


def _server_list(servers: str | Sequence[str]) -> list[str]:
    urls = [servers] if isinstance(servers, str) else list(servers)
    if not urls:
        raise ConfigError("a publisher needs at least one server URL")
    return [u.rstrip("/") for u in urls]


@attrs.frozen(kw_only=True)
class PublishSettings:
    """How every publisher talks to its servers, as one value (``attrs.evolve`` changes one field).

    * ``api_token`` — bearer token for the servers' weight-changing routes.
    * ``timeout_s`` — the bound on each publish (and, capped at 60 s, on each control call).
    * ``pause_mode`` — how the servers pause generation while weights change.
    * ``lora`` — ``"error"`` refuses LoRA tensors in a full-weight publish; ``"drop"`` leaves them out.
    * ``run_id`` — prefix of every update id (a random one by default).
    * ``allow_version_reset`` — a new run that restarts its step count against a long-lived server must
      say so: otherwise a version that does not increase is refused (it usually means two trainers share
      a server).
    """

    api_token: str | None = attrs.field(default=None, repr=False)
    timeout_s: float = attrs.field(default=600.0, validator=positive_number())
    pause_mode: str = "keep"
    lora: Literal["error", "drop"] = "error"
    run_id: str | None = None
    allow_version_reset: bool = False


DEFAULT_PUBLISH_SETTINGS = PublishSettings()


class PublisherBase:
    """Common state for the publishers (structurally a ludic-train ``PolicyPublisher``)."""

    def __init__(self, servers: str | Sequence[str], settings: PublishSettings) -> None:
        self.servers = _server_list(servers)
        self.settings = settings
        self.run_id = settings.run_id or uuid.uuid4().hex[:12]
        control_timeout_s = min(60.0, settings.timeout_s)
        self.controls = [
            ServerControl(url, api_token=settings.api_token, timeout_s=control_timeout_s)
            for url in self.servers
        ]
        self.last_version: int | None = None

    def update_id(self, version: int) -> str:
        return f"{self.run_id}-v{version}"

    def prepare(self, named_tensors: Mapping[str, Any], version: int) -> dict[str, Any]:
        check_int("version", version, 0)
        tensors = normalize_names(named_tensors, lora=self.settings.lora)
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
