"""Dedicated sandbox uids, claimed per process with file locks so that pools never share one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd

from ludic_core.errors import ConfigError

__all__ = ["UidLease", "claim_uids"]

DEFAULT_UID_BASE = 61000
DEFAULT_UID_RANGE = 2048
LOCK_DIR = "/run/lock/ludic-sandbox" if os.path.isdir("/run/lock") else "/tmp/ludic-sandbox-locks"


class UidLease:
    """Holds ``uids`` (each locked by an open ``flock``) until :meth:`release` or process exit."""

    def __init__(self, uids: list[int], handles: list[int]) -> None:
        self.uids = uids
        self._handles = handles

    def release(self) -> None:
        for fd in self._handles:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._handles = []


def _assigned(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def claim_uids(count: int, *, base: int = DEFAULT_UID_BASE, span: int = DEFAULT_UID_RANGE) -> UidLease:
    """Claim ``count`` uids in ``[base, base + span)`` that no account uses and no other pool holds.

    A uid that owns no account has no files and no processes of its own, so everything it owns
    afterwards was made by a sandbox run, and only root can leave it.
    """
    if os.geteuid() != 0:
        raise ConfigError("dedicated sandbox uids need root; run as root or pass drop_privileges=False")
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    uids: list[int] = []
    handles: list[int] = []
    for uid in range(base, base + span):
        if len(uids) == count:
            break
        if _assigned(uid):
            continue
        fd = os.open(os.path.join(LOCK_DIR, f"uid-{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        uids.append(uid)
        handles.append(fd)
    if len(uids) < count:
        UidLease(uids, handles).release()
        raise ConfigError(f"only {len(uids)} free sandbox uids in [{base}, {base + span}); {count} needed")
    return UidLease(uids, handles)
