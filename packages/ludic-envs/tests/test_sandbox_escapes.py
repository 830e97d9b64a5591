"""Escapes a security review found, each tried for real: host paths that persist across runs (at any
depth, made at any time), host Unix sockets (bound, hard-linked, in another network namespace,
abstract), host IPC objects, an uncapped work directory, and a memory cap that a program multiplied
by forking."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ludic_core.errors import ConfigError
from ludic_envs.codeexec import AssertTest, ExecutionResult, SandboxLimits, SandboxPool
from ludic_envs.codeexec.cgroups import (
    CgroupUnavailable,
    _make_base,
    oom_kills,
    parent_candidates,
    remove_run_group,
)
from ludic_envs.codeexec.process import LAUNCHER
from ludic_envs.codeexec.rootfs import DEVICES, root_spec

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


def _private_root_or_skip(result: ExecutionResult) -> None:
    """As a normal user the private root needs a user namespace, which a kernel may refuse: then the
    run says why, and there is nothing to test."""
    if not result.isolation.private_root:
        assert not AS_ROOT, result.to_dict()
        assert any("unshare" in note for note in result.isolation.notes), result.isolation
        pytest.skip(f"no private root here: {result.isolation.notes}")


# --- the file system a run sees -----------------------------------------------------------------


def _take_back(paths: list[str]) -> list[str]:
    """Those of ``paths`` that exist on the host, removed (so a failing test leaves nothing)."""
    found = [p for p in paths if os.path.exists(p)]
    for path in found:
        os.unlink(path)
    return found


async def test_the_run_sees_a_root_built_from_nothing(pool: SandboxPool) -> None:
    code = textwrap.dedent(
        f"""
        import os
        print(sorted(os.listdir('/')))
        print(sorted(os.listdir('/dev')))
        for path in ('/proc', '/sys', '/run', '/var', '/home', '/root', {str(Path(__file__).parent)!r}):
            print(path, os.path.exists(path))
        """
    )
    result = await _run(pool, code)
    _private_root_or_skip(result)
    lines = result.stdout.splitlines()
    top = set(eval(lines[0]))  # a printed list of names
    assert top <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "tmp"} | {
        p.strip("/").split("/")[0] for p in result.isolation.read_only
    }, top
    assert set(eval(lines[1])) == {*DEVICES, "shm"}
    assert all(line.endswith(" False") for line in lines[2:]), result.stdout
    assert "/usr" in result.isolation.read_only


@pytest.fixture
def late_writable_dirs() -> Iterator[list[str]]:
    """World-writable host directories made after the pool started, one of them deep."""
    base = Path(__file__).parent / f".ww-{uuid.uuid4().hex[:8]}"
    deep = base / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    for path in (base, deep):
        path.chmod(0o1777)
    try:
        yield [str(base), str(deep)]
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_no_write_persists_on_the_host_or_reaches_the_next_run(
    pool: SandboxPool, late_writable_dirs: list[str]
) -> None:
    name = f"ludic-persist-{uuid.uuid4().hex}"
    targets = ["/tmp", "/dev/shm", "/var/tmp", "/run/lock", *late_writable_dirs]
    code = textwrap.dedent(
        f"""
        import os
        for d in {targets!r}:
            try:
                open(os.path.join(d, {name!r}), 'w').write('left for the next run')
                print('wrote', d)
            except OSError as exc:
                print('refused', d, type(exc).__name__)
        """
    )
    first = await _run(pool, code)
    second = await _run(
        pool, f"import os\nprint([d for d in {targets!r} if os.path.exists(os.path.join(d, {name!r}))])\n"
    )
    leaked = _take_back([os.path.join(d, name) for d in targets])
    _private_root_or_skip(first)
    assert leaked == [], f"persisted on the host: {leaked}"
    assert second.stdout == "[]\n", f"the next run found: {second.stdout}"
    # The run's own /tmp and /dev/shm are writable (programs need them); the host's dirs are absent.
    assert "wrote /tmp" in first.stdout and "wrote /dev/shm" in first.stdout, first.stdout
    for d in late_writable_dirs:
        assert f"refused {d} FileNotFoundError" in first.stdout, first.stdout


async def test_the_work_directory_and_tmp_share_one_capped_space() -> None:
    limits = SandboxLimits(cpu_s=4, wall_s=8, memory_bytes=200 * MiB, tmpfs_bytes=4 * MiB)
    code = textwrap.dedent(
        """
        import errno
        written = 0
        try:
            for i in range(64):  # 64 MiB in 1 MiB files: each under the file size limit
                with open(('/tmp/' if i % 2 else '') + f'f{i}', 'wb') as fh:
                    fh.write(b'x' * 2**20)
                written += 1
        except OSError as exc:
            print('stopped', written, errno.errorcode[exc.errno])
        """
    )
    with SandboxPool(max_concurrency=1, limits=limits) as capped:
        result = await _run(capped, code)
    _private_root_or_skip(result)
    stopped, count, why = result.stdout.split()
    assert stopped == "stopped" and why == "ENOSPC" and int(count) < 4, result.stdout


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
async def test_the_interpreter_is_bound_read_only_even_from_a_world_writable_dir(
    writable_interpreter_dir: Path,
) -> None:
    interpreter = str(writable_interpreter_dir / "python")
    code = f"open({str(writable_interpreter_dir / 'planted')!r}, 'w').write('x')\n"
    with SandboxPool(max_concurrency=1, limits=LIMITS, python_executable=interpreter) as ww_pool:
        result = await _run(ww_pool, code)
    _private_root_or_skip(result)
    assert not _take_back([str(writable_interpreter_dir / "planted")]), "wrote through the read-only bind"
    assert "Read-only file system" in result.stderr, result.to_dict()
    assert str(writable_interpreter_dir) in result.isolation.read_only, result.isolation


# --- host Unix sockets --------------------------------------------------------------------------


def _listen_in_another_network_namespace(address: str) -> subprocess.Popen[str] | None:
    """A listener bound at ``address`` by a process in a network namespace of its own (root only)."""
    if not AS_ROOT or shutil.which("unshare") is None:
        return None
    script = textwrap.dedent(
        f"""
        import socket, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind({address!r}); s.listen(8)
        print('listening', flush=True)
        time.sleep(120)
        """
    )
    process = subprocess.Popen(
        ["unshare", "--net", sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "listening":
        process.kill()
        return None
    os.chmod(address, 0o777)
    return process


@pytest.fixture
def host_sockets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, socket.socket | None]]:
    """Host Unix sockets anyone may connect to: in world-writable /run/lock, in root's /run (where
    databases and docker keep theirs), in a plain host directory, a hard link to one of them placed
    elsewhere, one bound in another network namespace, and an abstract one."""
    tag = uuid.uuid4().hex[:8]
    plain_dir = Path(__file__).parent / f".sock-{tag}"  # beside the tests
    plain_dir.mkdir()
    plain_dir.chmod(0o755)
    addresses = [f"/run/lock/ludic-{tag}.sock", f"/run/ludic-{tag}.sock", str(plain_dir / "s.sock")]
    if not AS_ROOT:
        addresses = [a for a in addresses if os.access(os.path.dirname(a), os.W_OK)]
    addresses = [a for a in addresses if os.path.isdir(os.path.dirname(a))]
    listeners: dict[str, socket.socket | None] = {}
    elsewhere = None
    try:
        for address in addresses:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            os.chmod(address, 0o777)
            listeners[address] = listener
        link = str(plain_dir / "hard-link.sock")
        os.link(addresses[-1], link)  # reaches the same listener; /proc/net/unix never lists it
        listeners[link] = None
        elsewhere = _listen_in_another_network_namespace(str(plain_dir / "netns.sock"))
        if elsewhere is not None:
            listeners[str(plain_dir / "netns.sock")] = None
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(f"\0ludic-{tag}")
        listeners[f"\0ludic-{tag}"] = abstract
        for listener in listeners.values():
            if listener is not None:
                listener.listen(8)
                listener.setblocking(False)
        yield listeners
    finally:
        if elsewhere is not None:
            elsewhere.kill()
            elsewhere.wait(timeout=10)
        for listener in listeners.values():
            if listener is not None:
                listener.close()
        shutil.rmtree(plain_dir, ignore_errors=True)
        for address in addresses:
            if os.path.exists(address):
                os.unlink(address)


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


def _assert_unreached(result: ExecutionResult, listeners: dict[str, socket.socket | None]) -> None:
    assert result.exit_code == 0, result.to_dict()
    for address, listener in listeners.items():
        assert f"refused {address!r}" in result.stdout, result.stdout
        if listener is not None:
            with pytest.raises(BlockingIOError):  # nothing waits in its backlog either
                listener.accept()
    assert "connected" not in result.stdout, result.stdout


async def test_host_unix_sockets_are_unreachable_in_the_private_root(
    pool: SandboxPool, host_sockets: dict[str, socket.socket | None]
) -> None:
    result = await _run(pool, _connect_code(list(host_sockets)))
    _private_root_or_skip(result)
    assert result.isolation.network_method == "namespace", result.isolation
    _assert_unreached(result, host_sockets)
    for address in host_sockets:
        if address.startswith("/"):  # none of the paths exists inside: not masked, absent
            assert f"refused {address!r} FileNotFoundError" in result.stdout, result.stdout


@pytest.mark.skipif(os.uname().machine not in SECCOMP_ARCHES, reason="no seccomp socket filter for this arch")
async def test_host_unix_sockets_are_unreachable_under_the_seccomp_filter(
    host_sockets: dict[str, socket.socket | None],
) -> None:
    """The filter alone (no private root, no namespace): socket() fails for AF_UNIX too."""
    with SandboxPool(
        max_concurrency=1, limits=LIMITS, network_methods=("seccomp",), private_root=False
    ) as seccomp_pool:
        result = await _run(seccomp_pool, _connect_code(list(host_sockets)))
    assert result.isolation.network_method == "seccomp" and not result.isolation.private_root
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
    _private_root_or_skip(result)
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
    assert hog.limit == "memory", hog.to_dict()  # the cap, not the wall limit, ended it
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
def test_launcher_as_a_normal_user_builds_a_private_root(nobody_workdir: Path) -> None:
    """The launcher run as an ordinary uid (no dedicated uid, no root): the private root comes from a
    user namespace; where the kernel refuses one, the status says why."""
    python = SYSTEM_PYTHON
    if not (os.path.exists(python) and _readable_by_others(python) and _readable_by_others(LAUNCHER)):
        pytest.skip(f"the unprivileged uid cannot run {python} {LAUNCHER}")
    workdir = nobody_workdir
    root_dir = workdir.parent / "root"
    root_dir.mkdir()
    os.chown(root_dir, NOBODY, NOBODY)
    code = "import os\nopen('/tmp/x', 'w').write('x')\nprint(os.getuid(), sorted(os.listdir('/tmp')), os.path.exists('/run'))\n"
    status_read, status_write = os.pipe()
    cfg = {
        "workdir": str(workdir), "argv": [python, "-I", "-c", code], "env": {"PATH": "/usr/bin"},
        "status_fd": status_write, "isolate_network": True, "network_methods": ["namespace", "seccomp"],
        "root": root_spec(python).to_config(), "root_dir": str(root_dir), "devices": list(DEVICES),
        "cgroup": None, "uid": None, "gid": None, "cpu_s": 2,
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
    if not setup["private_root"]:
        assert "unshare" in setup.get("private_root_error", ""), setup
        pytest.skip(f"this kernel refuses an unprivileged user namespace: {setup['private_root_error']}")
    assert setup["user_namespace"], setup
    assert events[-1] == {"event": "exit", "exit_code": 0}, (events, launched.stderr)
    # The new root's /tmp holds only the run directory's parents and what the run wrote.
    assert launched.stdout.strip() == f"{NOBODY} [{workdir.parent.name!r}, 'x'] False", launched.stdout
