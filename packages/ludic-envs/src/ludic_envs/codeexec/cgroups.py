"""A cgroup v2 group per run, so that the memory cap holds for the whole run, not per process.

The pool prepares one parent group, ``ludic-sandbox``, with the ``memory`` (and, where available,
``pids``) controller enabled for its children; each run gets a child group with ``memory.max`` (and
``memory.swap.max`` = 0, ``pids.max``) that the launcher joins before it forks the program, so every
process of the run is charged together. The kernel's OOM killer enforces the cap; ``memory.events``
tells afterwards whether it had to.

The parent can only hold child groups with a controller when its own parent enables it, and cgroup
v2 lets a group with processes enable nothing for its children (except the root group). So
``ludic-sandbox`` is made either under the hierarchy's root or beside this process's own group,
whose parent already enables ``memory`` for it. A host that offers neither (cgroup v1, a container
with its processes in its root group, a user without a delegated subtree) falls back to the
watchdog's sum (``ludic_envs.codeexec.memcap``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time

import attrs

__all__ = [
    "PARENT_GROUP",
    "CgroupBase",
    "CgroupUnavailable",
    "create_run_group",
    "oom_kills",
    "prepare_cgroup_base",
    "remove_run_group",
    "run_group_name",
]

PARENT_GROUP = "ludic-sandbox"
_CONTROLLERS = ("memory", "pids")


class CgroupUnavailable(Exception):
    """No cgroup v2 group with the memory controller can be made here; the message says why."""


@attrs.frozen
class CgroupBase:
    """The parent group runs are made in, and the controllers its children have."""

    path: str
    controllers: frozenset[str]


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    # cgroup files exist once the group does; never create one (a typo must fail, not make a file).
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode("ascii"))
    finally:
        os.close(fd)


def cgroup2_mount(mountinfo: str) -> tuple[str, str] | None:
    """(mount point, root of the hierarchy it shows) of the first cgroup2 mount in ``mountinfo``."""
    for line in mountinfo.splitlines():
        if " - " not in line:
            continue
        fields, fstype = line.split(), line.split(" - ", 1)[1].split()[0]
        if fstype == "cgroup2" and len(fields) >= 5:
            return fields[4], fields[3]
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path (``0::/path`` in /proc/self/cgroup), or None."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or None
    return None


def parent_candidates(mountinfo: str, proc_cgroup: str) -> list[str]:
    """Directories under which ``ludic-sandbox`` may be made: the hierarchy's root as mounted, then
    the parent of this process's own group (when that is visible under the mount)."""
    mount = cgroup2_mount(mountinfo)
    if mount is None:
        return []
    point, root = mount
    candidates = [point]
    own = own_cgroup(proc_cgroup)
    if own is not None and (root == "/" or own == root or own.startswith(root.rstrip("/") + "/")):
        relative = own[len(root) :] if root != "/" else own
        parent = os.path.dirname(relative.rstrip("/")) or "/"
        candidate = os.path.normpath(os.path.join(point, parent.lstrip("/")))
        if candidate not in candidates:
            candidates.append(candidate)
    return candidates


def _make_base(parent: str) -> CgroupBase:
    available = _read(os.path.join(parent, "cgroup.controllers")).split()
    if "memory" not in available:
        raise CgroupUnavailable(f"{parent}: no memory controller (has {' '.join(available) or 'none'})")
    wanted = [c for c in _CONTROLLERS if c in available]
    enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
    missing = [c for c in wanted if c not in enabled]
    if missing:  # EBUSY where the parent holds processes itself (and is not the root)
        _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in missing))
    base = os.path.join(parent, PARENT_GROUP)
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o755)
    _write(os.path.join(base, "cgroup.subtree_control"), " ".join(f"+{c}" for c in wanted))
    return CgroupBase(path=base, controllers=frozenset(wanted))


def prepare_cgroup_base() -> CgroupBase:
    """Make (or reuse) ``ludic-sandbox`` with the memory controller for its children; raises
    :class:`CgroupUnavailable` naming why each place was refused. Also removes the groups of runs
    whose pool process died before it could."""
    try:
        mountinfo, proc_cgroup = _read("/proc/self/mountinfo"), _read("/proc/self/cgroup")
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read this process's cgroups: {exc}") from exc
    candidates = parent_candidates(mountinfo, proc_cgroup)
    if not candidates:
        raise CgroupUnavailable("no cgroup2 filesystem is mounted")
    reasons = []
    for parent in candidates:
        try:
            base = _make_base(parent)
        except CgroupUnavailable as exc:
            reasons.append(str(exc))
            continue
        except OSError as exc:
            reasons.append(f"{parent}: {exc.strerror or exc}")
            continue
        _remove_stale_groups(base)
        return base
    raise CgroupUnavailable("; ".join(reasons))


def run_group_name(token: str) -> str:
    """Names carry the pool process's pid, so a later pool can tell which groups were orphaned."""
    return f"run-{os.getpid()}-{token}"


def _remove_stale_groups(base: CgroupBase) -> None:
    try:
        names = os.listdir(base.path)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        if os.path.exists(f"/proc/{parts[1]}"):
            continue  # its pool is alive (or the pid was reused: left for a later sweep)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(base.path, name))


def create_run_group(base: CgroupBase, name: str, memory_bytes: int, max_processes: int) -> str:
    """A child group capped at ``memory_bytes`` (no swap) and ``max_processes`` tasks besides the
    launcher; removed again if any limit cannot be set."""
    group = os.path.join(base.path, name)
    os.mkdir(group, 0o755)
    try:
        _write(os.path.join(group, "memory.max"), str(memory_bytes))
        if os.path.exists(os.path.join(group, "memory.swap.max")):  # absent without swap accounting
            _write(os.path.join(group, "memory.swap.max"), "0")
        if "pids" in base.controllers:
            _write(os.path.join(group, "pids.max"), str(max_processes + 1))
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(group)
        raise
    return group


def oom_kills(group: str) -> int:
    """How many processes of ``group`` the OOM killer ended (0 if the group cannot be read)."""
    try:
        events = _read(os.path.join(group, "memory.events"))
    except OSError:
        return 0
    for line in events.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


async def remove_run_group(group: str, timeout_s: float) -> str | None:
    """Remove ``group`` once it is empty, killing what is left in it (``cgroup.kill``) if it is not;
    None when done, else why not after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(group)
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                return f"cgroup {group} not removed: {exc.strerror or exc}"
        with contextlib.suppress(OSError):
            _write(os.path.join(group, "cgroup.kill"), "1")  # Linux 5.14+: every process in it
        await asyncio.sleep(0.01)
