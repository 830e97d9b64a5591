"""Which host directories a run sees as private, empty copies: every world-writable one, and ``/run``.

A world-writable directory is where one run could leave something for a later run (or for the host)
to find, and where host programs leave Unix sockets; ``/run`` holds most of the host's sockets
(databases, docker, dbus) even though only root may write there. Inside the run's mount namespace
the launcher covers each of them with an empty tmpfs.

Finding them walks the top of the filesystem a few levels deep and reads the mount table, which
takes 10-20 ms: a pool does it once, when it starts, and every run reuses the list. Network and FUSE
filesystems are neither walked nor looked at (a dead server would hang the walk without a timeout),
so a world-writable directory on one is not found.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

__all__ = ["ALWAYS_PRIVATE", "SCAN_DEPTH", "WELL_KNOWN_WRITABLE", "private_dirs", "world_writable_dirs"]

ALWAYS_PRIVATE = ("/tmp", "/var/tmp", "/dev/shm", "/run")
"""Covered whenever they exist, whatever their mode."""
WELL_KNOWN_WRITABLE = (
    "/run/lock",
    "/var/lock",
    "/var/crash",
    "/var/metrics",
    "/dev/mqueue",
    "/var/lib/php/sessions",
    "/var/spool/samba",
    "/run/screen",
)
"""World-writable on common distributions, some deeper than the scan reaches."""
SCAN_DEPTH = 3
"""How deep below ``/`` the scan looks (``/var/lib/x`` is depth 3)."""
# Kernel interfaces, not storage: never scanned, never covered.
_PSEUDO_FILESYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "securityfs",
        "debugfs",
        "tracefs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "binfmt_misc",
        "efivarfs",
        "autofs",
        "nsfs",
    }
)


# Remote or user-space filesystems: a stat there may block for as long as the server does.
_REMOTE_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "afs", "9p", "lustre", "gpfs", "fuse"}
)


def _not_looked_at(fstype: str) -> bool:
    return fstype in _PSEUDO_FILESYSTEMS or fstype in _REMOTE_FILESYSTEMS or fstype.startswith("fuse.")


def _unescape_mount_path(field: str) -> str:
    """Mount points in /proc/self/mountinfo escape space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount this process sees."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype = line.split(" - ", 1)[1].split()[0]
        mounts.append((_unescape_mount_path(fields[4]), fstype))
    return mounts


def _world_writable_dir(path: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) and bool(mode & stat.S_IWOTH)


def _scan(top: str, depth: int, skip: frozenset[str], found: list[str]) -> None:
    """Append the world-writable directories at most ``depth`` levels below ``top`` (symlinks and
    ``skip`` are not entered; below a world-writable directory nothing more is needed)."""
    if depth == 0:
        return
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.path in skip:
                continue
            if entry.stat(follow_symlinks=False).st_mode & stat.S_IWOTH:
                found.append(entry.path)
                continue
        except OSError:
            continue
        _scan(entry.path, depth - 1, skip, found)


def world_writable_dirs(depth: int = SCAN_DEPTH) -> list[str]:
    """World-writable directories of the host: found by the scan, mount points, well-known ones."""
    mounts = _mounts()
    skip = frozenset(point for point, fstype in mounts if _not_looked_at(fstype))
    found: list[str] = []
    _scan("/", depth, skip, found)
    candidates = [point for point, fstype in mounts if not _not_looked_at(fstype)]
    well_known = [path for path in WELL_KNOWN_WRITABLE if not _inside(path, skip)]
    found.extend(path for path in (*candidates, *well_known) if _world_writable_dir(path))
    return found


def _inside(path: str, parents: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def private_dirs(depth: int = SCAN_DEPTH) -> tuple[str, ...]:
    """The directories a run gets private copies of: real paths (a symlink such as ``/var/lock``
    resolves to ``/run/lock``), existing directories only, parents before their children, ``/``
    never (a path is dropped if it resolves there)."""
    real: set[str] = set()
    for path in (*ALWAYS_PRIVATE, *world_writable_dirs(depth)):
        resolved = os.path.realpath(path)
        if resolved != "/" and os.path.isdir(resolved) and not _inside(resolved, ("/proc", "/sys")):
            real.add(resolved)
    # Inside a world-writable one (its copy starts empty, like /tmp) a nested one need not exist;
    # inside /run (root's) it is made again, so that /run/lock still works.
    writable = [p for p in real if _world_writable_dir(p)]
    kept = [p for p in real if not any(_inside(p, (w,)) and p != w for w in writable)]
    return tuple(sorted(kept, key=lambda p: (p.count("/"), p)))
