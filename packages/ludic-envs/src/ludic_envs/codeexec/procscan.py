"""Find and kill every process a sandbox run started, including ones that left its session."""

from __future__ import annotations

import os
import signal

__all__ = ["kill_pids", "pids_of_uid", "pids_with_marker", "proportional_bytes", "resident_bytes"]

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _alive(pid: int) -> bool:
    """False for zombies: they are dead and only wait for their parent to reap them."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself contain spaces or ")".
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def pids_of_uid(uid: int) -> list[int]:
    """Processes whose owner is ``uid``: exact for a dedicated sandbox uid (only root can leave it)."""
    found = []
    for pid in _pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid and _alive(pid):
                found.append(pid)
        except OSError:
            continue
    return found


def pids_with_marker(marker: bytes, session_id: int | None = None, exclude: int | None = None) -> list[int]:
    """Processes whose environment holds ``marker`` or that are in ``session_id``.

    Used without a dedicated uid: a program can scrub its children's environment and leave the
    session, so this is best effort (see the isolation table in docs/packages/ludic-envs.md).
    """
    own = os.getpid()
    found = []
    for pid in _pids():
        if pid in (own, exclude) or not _alive(pid):
            continue
        try:
            if session_id is not None and os.getsid(pid) == session_id:
                found.append(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def resident_bytes(pids: list[int]) -> int:
    """The summed resident set sizes of ``pids`` (pages shared between them count once each);
    processes that are gone count 0."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
    return total


def proportional_bytes(pids: list[int]) -> int:
    """The summed proportional set sizes of ``pids`` (a page shared by n processes counts 1/n in
    each), which adds up to what they use together. Slower than :func:`resident_bytes` (the kernel
    walks each page table). A process whose PSS cannot be read counts its resident size."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                rollup = fh.read()
        except OSError:
            total += resident_bytes([pid])
            continue
        for line in rollup.splitlines():
            if line.startswith(b"Pss:"):
                total += int(line.split()[1]) * 1024  # in kB
                break
        else:
            total += resident_bytes([pid])
    return total


def kill_pids(pids: list[int]) -> int:
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            continue
    return killed
