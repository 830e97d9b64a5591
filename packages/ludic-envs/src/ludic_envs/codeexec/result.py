"""What one sandboxed execution produced."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

__all__ = ["ExecutionResult", "IsolationReport", "LimitKind"]

LimitKind: TypeAlias = Literal["cpu_time", "wall_time", "memory", "file_size", "processes", "output"]


@attrs.frozen
class IsolationReport:
    """Which isolation layers were actually in force for a run (they depend on the host's kernel
    and privileges; see the isolation table in docs/packages/ludic-envs.md)."""

    uid: int | None = None
    dedicated_uid: bool = False
    network_isolated: bool = False
    network_method: str | None = None  # "namespace" or "seccomp" (ludic_envs.codeexec.network)
    private_root: bool = False  # the run saw a root built from nothing (ludic_envs.codeexec.rootfs)
    read_only: tuple[str, ...] = ()  # the host paths bound into it, read-only
    masked_sockets: tuple[str, ...] = ()  # host Unix sockets under those paths, masked
    memory_method: str | None = None  # "cgroup" or "aggregate" (ludic_envs.codeexec.memcap)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "dedicated_uid": self.dedicated_uid,
            "network_isolated": self.network_isolated,
            "network_method": self.network_method,
            "private_root": self.private_root,
            "read_only": list(self.read_only),
            "masked_sockets": list(self.masked_sockets),
            "memory_method": self.memory_method,
            "notes": list(self.notes),
        }


@attrs.frozen
class ExecutionResult:
    """One process run. ``stdout``/``stderr`` hold at most the configured caps (decoded leniently);
    ``limit`` names the limit that ended the run, if any; ``leftover_processes`` counts processes
    that were still alive after the main process exited and had to be killed."""

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    duration_s: float
    limit: LimitKind | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    leftover_processes: int = 0
    setup_error: str | None = None
    isolation: IsolationReport = attrs.field(factory=IsolationReport)

    @property
    def ok(self) -> bool:
        """Exited normally with status 0 and hit no limit."""
        return self.exit_code == 0 and self.limit is None and self.setup_error is None

    def excerpt(self, text: str, max_chars: int = 1000) -> str:
        return text if len(text) <= max_chars else text[: max_chars // 2] + "\n…\n" + text[-max_chars // 2 :]

    def to_dict(self, max_chars: int = 1000) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": self.excerpt(self.stdout, max_chars),
            "stderr": self.excerpt(self.stderr, max_chars),
            "duration_s": round(self.duration_s, 4),
            "limit": self.limit,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "leftover_processes": self.leftover_processes,
            "setup_error": self.setup_error,
            "isolation": self.isolation.to_dict(),
        }
