"""Escapes a security review found, each tried for real: world-writable host dirs that persist across
runs, host Unix sockets (filesystem and abstract), host IPC objects, and a memory cap that a program
multiplied by forking."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ludic_core.errors import ConfigError
from ludic_envs.codeexec import AssertTest, ExecutionResult, SandboxLimits, SandboxPool, hostdirs
from ludic_envs.codeexec.cgroups import (
    CgroupUnavailable,
    _make_base,
    oom_kills,
    parent_candidates,
    remove_run_group,
)
from ludic_envs.codeexec.hostdirs import private_dirs
from ludic_envs.codeexec.process import LAUNCHER

AS_ROOT = os.geteuid() == 0
MiB = 1024 * 1024
LIMITS = SandboxLimits(cpu_s=4, wall_s=8, memory_bytes=200 * MiB, max_processes=16)
SECCOMP_ARCHES = ("x86_64", "aarch64")
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(max_concurrency=2, limits=LIMITS) as p:
        yield p


async def _run(pool: SandboxPool, code: str, limits: SandboxLimits | None = None) -> ExecutionResult:
    report = await pool.run(code, [AssertTest("pass")], limits=limits)
    return report.outcomes[0].result


def _private_or_skip(result: ExecutionResult, path: str) -> None:
    """As a normal user the private dirs need a user namespace, which a kernel may refuse: then the
    run says why, and there is nothing to test."""
    if path not in result.isolation.private_tmp:
        assert not AS_ROOT, result.to_dict()
        assert any("unshare" in note for note in result.isolation.notes), result.isolation
        pytest.skip(f"no private {path} here: {result.isolation.notes}")


# --- world-writable host dirs -------------------------------------------------------------------


def _take_back(paths: list[str]) -> list[str]:
    """Those of ``paths`` that exist on the host, removed (so a failing test leaves nothing)."""
    found = [p for p in paths if os.path.exists(p)]
    for path in found:
        os.unlink(path)
    return found


def _world_writable_private_dirs() -> list[str]:
    return [d for d in private_dirs() if os.stat(d).st_mode & 0o002]


def test_every_world_writable_dir_and_run_are_made_private() -> None:
    dirs = private_dirs()
    assert "/run" in dirs or not os.path.isdir("/run")
    for well_known in ("/tmp", "/var/tmp", "/run/lock", "/dev/shm"):
        if os.path.isdir(well_known) and not os.path.islink(well_known):
            assert os.path.realpath(well_known) in dirs, dirs
    assert list(dirs) == sorted(dirs, key=lambda d: (d.count("/"), d)), "parents must come first"


@pytest.mark.parametrize(
    ("fstype", "found"), [("ext4", True), ("tmpfs", True), ("nfs4", False), ("fuse.sshfs", False)]
)
def test_world_writable_mounts_are_found_but_remote_ones_never_touched(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fstype: str, found: bool
) -> None:
    """A stat on a network filesystem can hang as long as its server: those are left alone."""
    mount_point = tmp_path / "shared"
    mount_point.mkdir()
    mount_point.chmod(0o777)
    monkeypatch.setattr(hostdirs, "_mounts", lambda: [(str(mount_point), fstype)])
    assert (str(mount_point) in hostdirs.world_writable_dirs(depth=0)) == found


async def test_writes_to_world_writable_dirs_do_not_persist(pool: SandboxPool) -> None:
    targets = _world_writable_private_dirs()
    name = f"ludic-persist-{uuid.uuid4().hex}"
    code = textwrap.dedent(
        f"""
        import os
        for d in {targets!r}:
            try:
                open(os.path.join(d, {name!r}), 'w').write('left for the next run')
                print('wrote', d, sorted(os.listdir(d)))
            except OSError as exc:
                print('refused', d, exc)
        """
    )
    result = await _run(pool, code)
    leaked = _take_back([os.path.join(d, name) for d in targets])
    _private_or_skip(result, "/run/lock" if "/run/lock" in targets else targets[0])
    assert leaked == [], f"persisted on the host: {leaked}"
    for d in targets:
        # The write went to a private copy, not refused: programs that need /run/lock still work.
        assert f"wrote {d} " in result.stdout, result.stdout
    if "/run/lock" in targets:
        assert f"wrote /run/lock [{name!r}]" in result.stdout, "the private copy starts empty"


@pytest.fixture
def writable_interpreter_dir() -> Iterator[Path]:
    """A world-writable host directory that holds the interpreter (a link to the system Python)."""
    path = Path(__file__).parent / f".ww-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o777)
    (path / "python").symlink_to(os.path.realpath(SYSTEM_PYTHON))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason=f"no {SYSTEM_PYTHON}")
async def test_a_world_writable_dir_holding_the_interpreter_is_bound_read_only(
    writable_interpreter_dir: Path,
) -> None:
    """Hidden under an empty tmpfs, it would leave no interpreter to run: it stays, read-only."""
    interpreter = str(writable_interpreter_dir / "python")
    code = f"open({str(writable_interpreter_dir / 'planted')!r}, 'w').write('x')\n"
    with SandboxPool(max_concurrency=1, limits=LIMITS, python_executable=interpreter) as ww_pool:
        ww_pool._private_dirs = (*ww_pool._private_dirs, str(writable_interpreter_dir))
        result = await _run(ww_pool, code)
    _private_or_skip(result, "/run")
    assert not _take_back([str(writable_interpreter_dir / "planted")]), "wrote through the read-only bind"
    assert "Read-only file system" in result.stderr, result.to_dict()
    assert any(str(writable_interpreter_dir) in note for note in result.isolation.notes), result.isolation


# --- host Unix sockets --------------------------------------------------------------------------


@pytest.fixture
def host_sockets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, socket.socket]]:
    """Host processes' listening Unix sockets, connectable by anyone: in world-writable /run/lock, in
    root's /run (where databases and docker keep theirs), in a plain host directory, and abstract."""
    tag = uuid.uuid4().hex[:8]
    plain_dir = Path(__file__).parent / f".sock-{tag}"  # beside the tests: no private dir covers it
    plain_dir.mkdir()
    plain_dir.chmod(0o755)
    addresses = [f"/run/lock/ludic-{tag}.sock", f"/run/ludic-{tag}.sock", str(plain_dir / "s.sock")]
    if not AS_ROOT:
        addresses = [a for a in addresses if os.access(os.path.dirname(a), os.W_OK)]
    addresses = [a for a in addresses if os.path.isdir(os.path.dirname(a))]
    listeners: dict[str, socket.socket] = {}
    try:
        for address in addresses:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            os.chmod(address, 0o777)
            listeners[address] = listener
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(f"\0ludic-{tag}")
        listeners[f"\0ludic-{tag}"] = abstract
        for listener in listeners.values():
            listener.listen(8)
            listener.setblocking(False)
        yield listeners
    finally:
        for address, listener in listeners.items():
            listener.close()
            if not address.startswith("\0"):
                os.unlink(address)
        plain_dir.rmdir()


def _connect_code(addresses: list[str]) -> str:
    return textwrap.dedent(
        f"""
        import socket
        for address in {addresses!r}:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(1)
                s.connect(address)
                print('connected', repr(address))
            except OSError as exc:
                print('refused', repr(address), type(exc).__name__)
        """
    )


def _assert_unreached(result: ExecutionResult, listeners: dict[str, socket.socket]) -> None:
    assert result.exit_code == 0, result.to_dict()
    for address, listener in listeners.items():
        assert f"refused {address!r}" in result.stdout, result.stdout
        with pytest.raises(BlockingIOError):  # nothing waits in its backlog either
            listener.accept()
    assert "connected" not in result.stdout, result.stdout


def _real_paths(paths: list[str]) -> set[str]:
    return {os.path.realpath(p) for p in paths}


async def test_host_unix_sockets_are_unreachable_in_the_network_namespace(
    pool: SandboxPool, host_sockets: dict[str, socket.socket]
) -> None:
    result = await _run(pool, _connect_code(list(host_sockets)))
    _private_or_skip(result, "/run")
    assert result.isolation.network_method == "namespace", result.isolation
    _assert_unreached(result, host_sockets)
    # A socket in a directory the sandbox covers with an empty tmpfs is hidden by it; any other one must
    # be masked (the test tree may itself live under a covered directory, e.g. a checkout in /tmp).
    covered = tuple(d + "/" for d in _real_paths(list(result.isolation.private_tmp)))
    outside = {
        p for p in _real_paths([a for a in host_sockets if a.startswith("/")]) if not p.startswith(covered)
    }
    assert outside <= set(result.isolation.masked_sockets), result.isolation


@pytest.mark.skipif(os.uname().machine not in SECCOMP_ARCHES, reason="no seccomp socket filter for this arch")
async def test_host_unix_sockets_are_unreachable_under_the_seccomp_filter(
    host_sockets: dict[str, socket.socket],
) -> None:
    """The filter alone (no private dirs, no namespace): socket() fails for AF_UNIX too."""
    with SandboxPool(
        max_concurrency=1, limits=LIMITS, network_methods=("seccomp",), private_tmp=False
    ) as seccomp_pool:
        result = await _run(seccomp_pool, _connect_code(list(host_sockets)))
    assert result.isolation.network_method == "seccomp" and result.isolation.private_tmp == ()
    _assert_unreached(result, host_sockets)
    assert result.stdout.count("PermissionError") == len(host_sockets), result.stdout


# --- host IPC objects ---------------------------------------------------------------------------


def _shm_segment_taken_back(key: int) -> bool:
    """Whether the host has a SysV shared memory segment with ``key`` (removed if so)."""
    keys = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    if str(key) not in keys:
        return False
    subprocess.run(["ipcrm", "-M", str(key)], check=False, timeout=10, capture_output=True)
    return True


async def test_sysv_shared_memory_dies_with_the_run(pool: SandboxPool) -> None:
    key = 0x1D1C0000 + os.getpid() % 0xFFFF
    code = textwrap.dedent(
        f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        segment = libc.shmget({key}, 4096, 0o1000 | 0o666)  # IPC_CREAT
        print('segment', segment, ctypes.get_errno())
        """
    )
    result = await _run(pool, code)
    left = _shm_segment_taken_back(key)
    _private_or_skip(result, "/run")
    assert result.stdout.startswith("segment ") and not result.stdout.startswith("segment -1"), result.stdout
    assert not left, "a shared memory segment of the run outlived it on the host"


# --- memory of the whole run --------------------------------------------------------------------


def _forking_hog(children: int, each: int, hold_s: float) -> str:
    return textwrap.dedent(
        f"""
        import os, time
        kids = []
        for _ in range({children}):
            pid = os.fork()
            if pid == 0:
                data = b'x' * {each}  # written, so resident
                time.sleep({hold_s})
                os._exit(0)
            kids.append(pid)
        for pid in kids:
            os.waitpid(pid, 0)
        print('all children done')
        """
    )


@pytest.mark.parametrize("methods", [("cgroup", "aggregate"), ("aggregate",)])
async def test_memory_cap_holds_for_the_whole_run(methods: tuple[str, ...]) -> None:
    cap = LIMITS.memory_bytes
    with SandboxPool(max_concurrency=1, limits=LIMITS, memory_methods=methods) as capped:  # type: ignore[arg-type]
        expected = "cgroup" if capped.memory_policy.cgroup_base is not None else "aggregate"
        # Four children at 60% of the cap each: every one is within its own RLIMIT_AS, not together.
        hog = await _run(capped, _forking_hog(4, int(cap * 0.6), hold_s=LIMITS.wall_s))
        half = await _run(capped, f"data = b'x' * {cap // 2}\nprint('fits')\n")
        base = capped.memory_policy.cgroup_base
    assert hog.limit == "memory", hog.to_dict()
    assert hog.duration_s < LIMITS.wall_s, "the cap, not the wall limit, ended it"
    assert hog.isolation.memory_method == expected
    assert half.ok and half.stdout == "fits\n", half.to_dict()
    assert half.isolation.memory_method == expected
    if expected == "aggregate" and "cgroup" in methods:
        assert any("no cgroup memory cap" in note for note in hog.isolation.notes), hog.isolation
    if base is not None:
        mine = [n for n in os.listdir(base.path) if n.startswith(f"run-{os.getpid()}-")]
        assert mine == [], f"run cgroups left behind: {mine}"


def test_memory_methods_are_validated() -> None:
    for bad in ((), "cgroup", ("cgroup", "rlimit")):
        with pytest.raises(ConfigError, match="memory_methods"):
            SandboxPool(max_concurrency=1, memory_methods=bad)  # type: ignore[arg-type]


def test_cgroup_parent_candidates() -> None:
    mountinfo = (
        "22 27 0:21 / /proc rw - proc proc rw\n41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"
    )
    # The hierarchy's root first, then beside this process's own group (its parent enables memory).
    assert parent_candidates(mountinfo, "0::/user.slice/session-3.scope\n") == [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/user.slice",
    ]
    assert parent_candidates(mountinfo, "0::/\n") == ["/sys/fs/cgroup"]
    assert parent_candidates("22 27 0:21 / /proc rw - proc proc rw\n", "0::/\n") == []
    # A mount that shows only part of the hierarchy: paths are relative to its root.
    subtree = "41 31 0:38 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert parent_candidates(subtree, "0::/docker/abc/inner\n") == ["/sys/fs/cgroup"]
    assert parent_candidates(subtree, "0::/docker/abc/a/b\n") == ["/sys/fs/cgroup", "/sys/fs/cgroup/a"]


async def test_cgroup_helpers_on_a_plain_directory_tree(tmp_path: Path) -> None:
    """What can be checked without a cgroup v2 memory controller: the refusal, the OOM count, the
    removal of a finished run's group."""
    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu io pids\n")
    with pytest.raises(CgroupUnavailable, match="no memory controller"):
        _make_base(str(parent))
    group = tmp_path / "run-1-abc"
    group.mkdir()
    assert oom_kills(str(group)) == 0  # no memory.events: nothing known, nothing counted
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n")
    assert oom_kills(str(group)) == 1
    (group / "memory.events").unlink()
    assert await remove_run_group(str(group), timeout_s=1.0) is None
    assert not group.exists()
    assert await remove_run_group(str(group), timeout_s=1.0) is None  # already gone: fine


# --- as a normal user ---------------------------------------------------------------------------

NOBODY = 65534


def _readable_by_others(path: str) -> bool:
    parents = Path(path).resolve().parents
    return all(os.stat(p).st_mode & 0o001 for p in parents) and bool(os.stat(path).st_mode & 0o004)


@pytest.fixture
def nobody_workdir() -> Iterator[Path]:
    """A run directory the unprivileged uid owns, on a path it can reach (pytest's tmp_path is not)."""
    base = Path(tempfile.mkdtemp(prefix="ludic-nobody-", dir="/tmp"))
    base.chmod(0o755)
    workdir = base / "run"
    workdir.mkdir()
    os.chown(workdir, NOBODY, NOBODY)
    try:
        yield workdir
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(not AS_ROOT, reason="runs the launcher as an unprivileged uid, which needs root")
def test_launcher_as_a_normal_user_makes_private_dirs(nobody_workdir: Path) -> None:
    """The launcher run as an ordinary uid (no dedicated uid, no root): private dirs come from a user
    namespace; where the kernel refuses one, the status says why."""
    python = SYSTEM_PYTHON
    if not (os.path.exists(python) and _readable_by_others(python) and _readable_by_others(LAUNCHER)):
        pytest.skip(f"the unprivileged uid cannot run {python} {LAUNCHER}")
    workdir = nobody_workdir
    name = f"ludic-persist-{uuid.uuid4().hex}"
    code = f"import os\nopen('/run/lock/{name}', 'w').write('x')\nprint(os.getuid(), os.listdir('/run'))\n"
    status_read, status_write = os.pipe()
    cfg = {
        "workdir": str(workdir), "argv": [python, "-I", "-c", code], "env": {"PATH": "/usr/bin"},
        "status_fd": status_write, "isolate_network": True, "network_methods": ["namespace", "seccomp"],
        "private_dirs": list(private_dirs()), "cgroup": None, "uid": None, "gid": None, "cpu_s": 2,
        "memory_bytes": 512 * MiB, "file_size_bytes": MiB, "max_open_files": 64, "max_processes": 16,
        "tmpfs_bytes": MiB,
    }  # fmt: skip
    try:
        launched = subprocess.run(
            [python, "-I", "-S", LAUNCHER, json.dumps(cfg)], user=NOBODY, group=NOBODY, extra_groups=[],
            pass_fds=(status_write,), capture_output=True, text=True, timeout=30, cwd="/",
        )  # fmt: skip
    finally:
        os.close(status_write)
    with os.fdopen(status_read, "rb") as fh:
        events = [json.loads(line) for line in fh.read().splitlines()]
    setup = events[0]
    assert setup["ok"], setup
    if "/run" not in setup["private_tmp"]:
        assert "unshare" in setup.get("private_tmp_error", ""), setup
        pytest.skip(f"this kernel refuses an unprivileged user namespace: {setup['private_tmp_error']}")
    assert setup["user_namespace"] and "/run/lock" in setup["private_tmp"], setup
    persisted = os.path.exists(f"/run/lock/{name}")
    if persisted:
        os.unlink(f"/run/lock/{name}")
    assert events[-1] == {"event": "exit", "exit_code": 0}, (events, launched.stderr)
    assert launched.stdout.strip() == f"{NOBODY} ['lock']", launched.stdout
    assert not persisted, "a normal user's write to /run/lock persisted"
