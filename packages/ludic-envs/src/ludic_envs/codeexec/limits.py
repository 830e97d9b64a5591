"""Resource limits for one sandboxed run."""

from __future__ import annotations

import attrs

from ludic_core.validation import positive_number

__all__ = ["SandboxLimits"]

MiB = 1024 * 1024


@attrs.frozen
class SandboxLimits:
    """Limits of one run. ``cpu_s`` is CPU time (RLIMIT_CPU), ``wall_s`` real time (a watchdog kills
    the whole run), ``memory_bytes`` memory, both per process (RLIMIT_AS) and for the whole run (a
    cgroup or the watchdog's sum, see ``memcap``), ``file_size_bytes`` the largest file it may write
    (RLIMIT_FSIZE), ``max_processes`` processes and threads alive at once (RLIMIT_NPROC under a
    dedicated uid, plus a watchdog), ``max_open_files`` descriptors (RLIMIT_NOFILE),
    ``stdout_bytes``/``stderr_bytes`` how much output is read before the run is killed, and
    ``tmpfs_bytes`` the size of the run's private root (its whole writable space: the run directory,
    ``/tmp`` and ``/dev/shm``; see ``rootfs``)."""

    cpu_s: float = attrs.field(default=2.0, validator=positive_number())
    wall_s: float = attrs.field(default=5.0, validator=positive_number())
    memory_bytes: int = attrs.field(default=512 * MiB, validator=positive_number())
    file_size_bytes: int = attrs.field(default=16 * MiB, validator=positive_number())
    max_processes: int = attrs.field(default=32, validator=positive_number())
    max_open_files: int = attrs.field(default=64, validator=positive_number())
    stdout_bytes: int = attrs.field(default=1 * MiB, validator=positive_number())
    stderr_bytes: int = attrs.field(default=256 * 1024, validator=positive_number())
    tmpfs_bytes: int = attrs.field(default=16 * MiB, validator=positive_number())
