"""The sandbox's first process: isolate, fork the program under limits, reap everything it leaves.

Run as ``python -I -S _launcher.py CONFIG_JSON`` in a fresh session, standard library only and
single-threaded (so ``preexec_fn``'s fork-in-a-threaded-parent hazards do not apply). It joins the run's
cgroup, enters new mount and IPC namespaces (in a user namespace when not root) and ``pivot_root`` s into
the root ``rootfs`` builds, cuts the network (a network namespace, else a seccomp filter denying
``socket()`` and io_uring), becomes a child subreaper so it reaps every orphan, and forks; the child
sets rlimits, enters the run directory, drops to the sandbox uid and execs. It reports one JSON line on
the status descriptor (closed in the child) after setup and one at exit, then reaps until every
descendant is gone.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import struct
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
_ST_RELATIME = 0x1000  # statvfs's f_flag bit; the others share the MS_ values
MNT_DETACH = 2
# pivot_root(2) has no glibc wrapper: its number per architecture.
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
PR_SET_CHILD_SUBREAPER = 36
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
# Per architecture: the audit arch seccomp reports, and the numbers of socket(2) and io_uring_setup(2).
# x86_64 syscalls with bit 30 set are the x32 ABI (same audit arch, other numbers): all denied.
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}
_X32_SYSCALL_BIT = 0x40000000
# Classic BPF opcodes (linux/filter.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare(libc: ctypes.CDLL, flags: int) -> str | None:
    if libc.unshare(ctypes.c_int(flags)) == 0:
        return None
    return os.strerror(ctypes.get_errno())


def _mount(
    libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        raise OSError(ctypes.get_errno(), f"mount {target}: {os.strerror(ctypes.get_errno())}")


def _enter_namespaces(libc: ctypes.CDLL, as_root: bool) -> str | None:
    """New mount and IPC namespaces (the IPC one so SysV and POSIX IPC objects of the host are out of
    reach, and the run's own die with it). Not as root, inside a new user namespace that maps this
    process's uid and gid to themselves. Returns why not, or None."""
    if as_root:
        error = _unshare(libc, CLONE_NEWNS | CLONE_NEWIPC)
        return None if error is None else f"unshare(CLONE_NEWNS|CLONE_NEWIPC): {error}"
    uid, gid = os.getuid(), os.getgid()
    error = _unshare(libc, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC)
    if error is not None:
        return f"unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWIPC): {error}"
    try:
        # Unmapped, files made on the private tmpfs could not be owned by anyone (EOVERFLOW).
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
                fh.write(text)
    except OSError as exc:
        return f"user namespace id maps: {exc}"
    return None


def _inside(path: str, parents: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def _host_socket_paths() -> list[str]:
    """Real paths of the filesystem Unix sockets bound in this network namespace (/proc/net/unix)."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return []
    # Unnamed sockets have no eighth field, abstract ones start with "@": neither has a path.
    named = [f[7] for f in (line.split(None, 7) for line in lines) if len(f) == 8 and f[7].startswith("/")]
    return sorted({os.path.realpath(path) for path in named})


def _bind_read_only(libc: ctypes.CDLL, source: str, target: str) -> None:
    # Not recursive: a file system mounted below ``source`` stays out (an empty directory inside).
    _mount(libc, source, target, None, MS_BIND, None)
    # A remount must keep the flags a user namespace may not drop (nosuid, nodev, noexec, atime).
    flags = os.statvfs(target).f_flag
    kept = flags & (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
    if flags & _ST_RELATIME:
        kept |= MS_RELATIME
    _mount(libc, None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept, None)


def _mount_point(root: str, path: str, *, directory: bool) -> str:
    """An empty directory or file at ``path`` inside ``root`` to mount over."""
    target = root + path
    if directory:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass
    return target


def _pivot_root(libc: ctypes.CDLL, root: str) -> None:
    """Make ``root`` the process's root and detach the host's (never reachable again)."""
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"no pivot_root syscall number for {os.uname().machine!r}")
    os.chdir(root)
    os.mkdir(".host", 0o700)
    if libc.syscall(ctypes.c_long(number), b".", b".host") != 0:
        raise OSError(ctypes.get_errno(), f"pivot_root: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")
    if libc.umount2(b"/.host", ctypes.c_int(MNT_DETACH)) != 0:
        raise OSError(ctypes.get_errno(), f"umount /.host: {os.strerror(ctypes.get_errno())}")
    os.rmdir("/.host")


def _build_root(libc: ctypes.CDLL, cfg: dict[str, Any], status: dict[str, Any]) -> None:
    """The run's root, built from nothing (see ``rootfs``), then entered."""
    root, workdir, spec = cfg["root_dir"], cfg["workdir"], cfg["root"]
    sockets = _host_socket_paths()  # read before the host's /proc goes away
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_bytes']},mode=755")
    for path in spec["read_only"]:
        _bind_read_only(libc, path, _mount_point(root, path, directory=os.path.isdir(path)))
    for path, target in spec["symlinks"]:
        os.symlink(target, root + path)
    for name in cfg["devices"]:
        _mount(libc, f"/dev/{name}", _mount_point(root, f"/dev/{name}", directory=False), None, MS_BIND, None)
    for path in ("/tmp", "/dev/shm"):
        os.makedirs(root + path, exist_ok=True)
        os.chmod(root + path, 0o1777)
    masked = []
    for path in sockets:
        if _inside(path, spec["read_only"]) and os.path.exists(root + path):
            _mount(libc, "/dev/null", root + path, None, MS_BIND, None)  # connect() finds no socket
            masked.append(path)
    # The run directory: a copy of the program's files, inside the capped tmpfs.
    inner = root + workdir
    os.makedirs(inner, mode=0o700, exist_ok=True)
    owner = (cfg["uid"], cfg["gid"]) if cfg["uid"] is not None else (os.getuid(), os.getgid())
    with os.scandir(workdir) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb") as source, open(os.path.join(inner, entry.name), "xb") as copy:
                    copy.write(source.read())
                os.chmod(os.path.join(inner, entry.name), 0o600)
                os.chown(os.path.join(inner, entry.name), *owner)
    os.chown(inner, *owner)
    _pivot_root(libc, root)
    status["private_root"] = True
    status["read_only"] = list(spec["read_only"])
    status["masked_sockets"] = masked


def _private_root(libc: ctypes.CDLL, cfg: dict[str, Any], as_root: bool, status: dict[str, Any]) -> None:
    """New namespaces and a root built from nothing; on failure the run goes on with the host's file
    system and ``private_root_error`` says why."""
    error = _enter_namespaces(libc, as_root)
    if error is not None:
        status["private_root_error"] = error
        return
    status["user_namespace"] = not as_root
    try:
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)
        _build_root(libc, cfg, status)
    except OSError as exc:
        status["private_root_error"] = str(exc)


def _socket_filter(machine: str) -> bytes | None:
    """A seccomp program: ``socket()`` for every family (AF_UNIX too: a host's Unix sockets, named or
    abstract, are reachable from any network) and ``io_uring_setup()`` fail with EPERM, as does any
    syscall made through a foreign ABI; everything else, ``socketpair()`` included, is allowed. None
    if ``machine`` is not an architecture listed in ``_SECCOMP_ARCHES``."""
    if machine not in _SECCOMP_ARCHES:
        return None
    arch, nr_socket, nr_io_uring_setup = _SECCOMP_ARCHES[machine]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    # struct seccomp_data: int nr at offset 0, u32 arch at 4.
    program = [
        (_LD_W_ABS, 0, 0, 4),  # A = arch
        (_JEQ_K, 1, 0, arch),  # native ABI: skip the deny
        (_RET_K, 0, 0, deny),
        (_LD_W_ABS, 0, 0, 0),  # A = syscall number
        (_JGE_K, 0, 1, _X32_SYSCALL_BIT),
        (_RET_K, 0, 0, deny),
        (_JEQ_K, 1, 0, nr_io_uring_setup),
        (_JEQ_K, 0, 1, nr_socket),
        (_RET_K, 0, 0, deny),
        (_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in program)


def _deny_network_sockets(libc: ctypes.CDLL) -> str | None:
    """Install the socket filter on this process (inherited by every child and kept across exec).
    Returns why it could not be installed, or None."""
    machine = os.uname().machine
    program = _socket_filter(machine)
    if program is None:
        return f"no seccomp socket filter for architecture {machine!r}"
    if sys.byteorder != "little":
        return "the seccomp socket filter assumes a little-endian machine"
    count = len(program) // 8
    filters = ctypes.create_string_buffer(program, len(program))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _SockFprog(count, ctypes.cast(filters, ctypes.c_void_p))
    # no_new_privs is required to install a filter without CAP_SYS_ADMIN; it does not stop the
    # child's own setuid() to the sandbox uid (only privilege gains through execve).
    if libc.prctl(
        PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
    ):
        return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
    if libc.prctl(
        PR_SET_SECCOMP,
        ctypes.c_ulong(SECCOMP_MODE_FILTER),
        ctypes.byref(fprog),
        ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    ):
        return f"prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}"
    return None


def _isolate_network(libc: ctypes.CDLL, methods: list[str], privileged: bool, status: dict[str, Any]) -> None:
    """Try ``methods`` in order until one cuts the network; record which one (or why none could).
    ``privileged``: root, or already in a user namespace of the launcher's own."""
    failures: list[str] = []
    for method in methods:
        if method == "namespace":
            # Privileged, a plain network namespace; otherwise one inside a new user namespace.
            error = _unshare(libc, CLONE_NEWNET if privileged else CLONE_NEWUSER | CLONE_NEWNET)
        elif method == "seccomp":
            error = _deny_network_sockets(libc)
        else:
            error = "unknown method"
        if error is None:
            status["network_isolated"] = True
            status["network_method"] = method
            if failures:
                status["network_note"] = f"network cut by {method} ({'; '.join(failures)})"
            return
        failures.append(f"{method}: {error}")
    status["network_error"] = "network not isolated: " + "; ".join(failures)


def _join_cgroup(group: str, status: dict[str, Any]) -> None:
    """Move this process into the run's cgroup; every process of the run inherits it."""
    try:
        with open(os.path.join(group, "cgroup.procs"), "w", encoding="ascii") as fh:
            fh.write(str(os.getpid()))
    except OSError as exc:
        status["cgroup_error"] = f"cannot join {group}: {exc.strerror or exc}"


def _count_processes(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _report(fd: int, payload: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(payload) + "\n").encode())


def _child(cfg: dict[str, Any], status_fd: int, running: int) -> None:
    """In the forked child: limits, directory, identity, exec. Never returns. ``running``: this
    user's processes before the run (counted while the host's /proc was still in view)."""
    try:
        os.close(status_fd)
        nproc = cfg["max_processes"]
        if cfg["uid"] is None:
            # Without a dedicated uid RLIMIT_NPROC counts every process of this user: allow what
            # already runs plus the budget (the parent's watchdog enforces the budget itself).
            nproc += running
        for name, value in (
            ("RLIMIT_CPU", cfg["cpu_s"]),
            ("RLIMIT_AS", cfg["memory_bytes"]),
            ("RLIMIT_FSIZE", cfg["file_size_bytes"]),
            ("RLIMIT_NOFILE", cfg["max_open_files"]),
            ("RLIMIT_NPROC", nproc),
            ("RLIMIT_CORE", 0),
        ):
            hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU first, then SIGKILL
            resource.setrlimit(getattr(resource, name), (value, hard))
        os.chdir(cfg["workdir"])
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        os.umask(0o077)
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    except BaseException as exc:
        os.write(2, f"sandbox: cannot start {cfg['argv'][0]}: {type(exc).__name__}: {exc}\n".encode())
    os._exit(126)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    status_fd = cfg["status_fd"]
    status: dict[str, Any] = {"event": "setup", "network_isolated": False, "private_root": False}
    libc = _libc()
    as_root = os.geteuid() == 0
    running = _count_processes(os.getuid()) if cfg["uid"] is None else 0
    try:
        # The cgroup first, while this process is still in the host's namespaces; then the mount
        # namespace, which reads the host's Unix sockets before the network one hides their list; a
        # seccomp filter last, so nothing in setup runs under it.
        if cfg["cgroup"] is not None:
            _join_cgroup(cfg["cgroup"], status)
        if cfg["root"] is not None:
            _private_root(libc, cfg, as_root, status)
        if cfg["isolate_network"]:
            privileged = as_root or bool(status.get("user_namespace"))
            _isolate_network(libc, cfg["network_methods"], privileged, status)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        status["ok"] = True
    except Exception as exc:  # report and stop: never run user code half-isolated
        status["ok"] = False
        status["error"] = f"{type(exc).__name__}: {exc}"
    status["uid"] = cfg["uid"] if cfg["uid"] is not None else os.getuid()
    _report(status_fd, status)
    if not status["ok"]:
        os._exit(125)
    child = os.fork()
    if child == 0:
        _child(cfg, status_fd, running)
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            code = os.waitstatus_to_exitcode(wait_status)
            _report(status_fd, {"event": "exit", "exit_code": code})
    os.close(status_fd)
    os._exit(0)


if __name__ == "__main__":  # imported (e.g. by an import check), it does nothing
    main()
