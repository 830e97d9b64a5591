"""Hostile programs against the real sandbox: each is contained, reported, cleaned up, and does not
disturb a well-behaved run in the same pool."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import textwrap
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ludic_core.errors import ConfigError, DataError
from ludic_envs.codeexec import (
    AssertTest,
    IOTest,
    IsolationReport,
    SandboxLimits,
    SandboxPool,
    TestReport,
    outputs_match,
    parse_tests,
)
from ludic_envs.codeexec.process import CLEANUP_GRACE_S
from ludic_envs.codeexec.procscan import pids_of_uid

AS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not AS_ROOT, reason="dedicated sandbox uids need root (CI runs as root)")

LIMITS = SandboxLimits(cpu_s=1, wall_s=2.5, memory_bytes=256 * 1024 * 1024, max_processes=16)
GOOD_CODE = "def add(a, b):\n    return a + b\n"
GOOD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(max_concurrency=2, limits=LIMITS) as p:
        yield p


def _run_dirs(pool: SandboxPool) -> list[str]:
    return os.listdir(pool._base_dir)


def _slot_processes(pool: SandboxPool) -> int:
    if pool._lease is None:
        return 0
    return sum(len(pids_of_uid(uid)) for uid in pool._lease.uids)


def _assert_no_unclosed_transports() -> None:
    """Every pipe and subprocess transport of finished runs was closed by the pool: collecting them
    warns of none (an unclosed one, collected after the pool's loop is closed, raises instead)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    unclosed = [str(w.message) for w in caught if "unclosed" in str(w.message)]
    assert unclosed == [], unclosed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


def _exists(path: str) -> bool:
    return os.path.exists(path)


async def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        await asyncio.sleep(0.02)


# Re-executes itself under a name the test can find, then sleeps far past any limit used with it (its
# run directory lives in the run's own root, which the host cannot read).
SLEEPER_NAME = "ludic-test-sleeper"
SLEEPER = (
    "import os, sys\n"
    f"os.execv(sys.executable, [sys.executable, '-I', '-c', 'import time; time.sleep(600)', {SLEEPER_NAME!r}])\n"
)


def _sleeper_pid(pool: SandboxPool) -> int | None:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if SLEEPER_NAME.encode() in fh.read().split(b"\0"):
                    return int(name)
        except OSError:
            continue
    return None


async def _hostile_with_neighbour(pool: SandboxPool, code: str) -> TestReport:
    """Run ``code`` (its single test just executes it) while a good submission runs beside it."""
    hostile = pool.run(code, [AssertTest("pass")])
    neighbour = pool.run(GOOD_CODE, GOOD_TESTS)
    report, good = await asyncio.gather(hostile, neighbour)
    assert good.all_passed, good.to_dict()
    assert _run_dirs(pool) == [], "a run directory was left behind"
    assert _slot_processes(pool) == 0, "a sandbox process survived its run"
    _assert_no_unclosed_transports()
    return report


async def test_good_code_passes_and_reports_isolation(pool: SandboxPool) -> None:
    report = await pool.run(GOOD_CODE, [*GOOD_TESTS, "assert add(2, 2) == 5"])
    assert (report.passed, report.total, report.fraction_passed) == (2, 3, pytest.approx(2 / 3))
    failed = report.outcomes[2]
    assert not failed.passed and "AssertionError" in failed.result.stderr and failed.result.limit is None
    iso = report.outcomes[0].result.isolation
    if AS_ROOT:
        assert iso.dedicated_uid and iso.uid is not None and iso.uid >= 61000
        assert iso.network_isolated and iso.network_method == "namespace"
        assert iso.private_root and "/usr" in iso.read_only
        assert iso.memory_method in ("cgroup", "aggregate")


async def test_io_tests_compare_stdout(pool: SandboxPool) -> None:
    code = "n = int(input())\nprint(n * 2)\nprint()\n"
    report = await pool.run(code, [{"input": "21\n", "output": "42"}, IOTest("1", "3")])
    assert [o.passed for o in report.outcomes] == [True, False]
    assert report.outcomes[1].result.stdout.startswith("2")


async def test_infinite_loop_hits_a_time_limit(pool: SandboxPool) -> None:
    report = await _hostile_with_neighbour(pool, "while True:\n    pass\n")
    result = report.outcomes[0].result
    assert not report.all_passed and result.limit in ("cpu_time", "wall_time")


async def test_sleeping_forever_hits_the_wall_limit(pool: SandboxPool) -> None:
    report = await _hostile_with_neighbour(pool, "import time\ntime.sleep(60)\n")
    assert report.outcomes[0].result.limit == "wall_time"


async def test_memory_bomb_is_refused(pool: SandboxPool) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 * 1024))\n"
    report = await _hostile_with_neighbour(pool, code)
    result = report.outcomes[0].result
    assert result.limit == "memory", result.to_dict()
    assert "MemoryError" in result.stderr


@root_only
async def test_fork_bomb_is_contained(pool: SandboxPool) -> None:
    code = textwrap.dedent(
        """
        import os, time
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
        """
    )
    report = await _hostile_with_neighbour(pool, code)
    result = report.outcomes[0].result
    assert not report.all_passed and result.limit in ("processes", "wall_time", "cpu_time"), result.to_dict()


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory outside every tmp dir (the private tmpfs hides those): next to this file."""
    path = Path(__file__).parent / f".sandbox-host-{uuid.uuid4().hex}"
    path.mkdir()
    try:
        yield path
    finally:
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


def expected_denial(path: Path, isolation: IsolationReport) -> str:
    """In a private root the host's path does not exist (unless it lies under a read-only bind);
    without one the sandbox uid is refused."""
    bound = any(path.resolve().is_relative_to(Path(p).resolve()) for p in isolation.read_only)
    return "FileNotFoundError" if isolation.private_root and not bound else "PermissionError"


@pytest.mark.parametrize("where", ["tmp", "host"])
async def test_writing_outside_the_sandbox_fails_or_vanishes(
    pool: SandboxPool, tmp_path: Path, host_dir: Path, where: str
) -> None:
    outside = (tmp_path if where == "tmp" else host_dir) / "escape.txt"
    shared_tmp = Path("/tmp") / f"ludic-escape-{uuid.uuid4().hex}"
    code = textwrap.dedent(
        f"""
        open('inside.txt', 'w').write('ok')  # the run's own directory is writable
        try:
            open({str(shared_tmp)!r}, 'w').write('x')  # world-writable /tmp: a private tmpfs
            print('tmp write ok')
        except OSError:
            pass
        open({str(outside)!r}, 'w').write('escaped')  # a directory of the host
        """
    )
    report = await _hostile_with_neighbour(pool, code)
    result = report.outcomes[0].result
    assert not shared_tmp.exists(), "a write to the shared /tmp leaked out of the sandbox"
    if AS_ROOT:
        # Host dirs refuse the sandbox uid; under the private tmpfs the host's /tmp path is absent.
        assert not outside.exists()
        assert not report.all_passed
        assert expected_denial(outside, result.isolation) in result.stderr


@root_only
@pytest.mark.parametrize("where", ["tmp", "host"])
async def test_reading_a_planted_private_file_fails(
    pool: SandboxPool, tmp_path: Path, host_dir: Path, where: str
) -> None:
    secret = (tmp_path if where == "tmp" else host_dir) / "secret.txt"
    secret.write_text("the answer is 42")
    secret.chmod(0o600)
    code = f"print(open({str(secret)!r}).read())\n"
    report = await _hostile_with_neighbour(pool, code)
    result = report.outcomes[0].result
    assert "42" not in result.stdout and not report.all_passed
    assert expected_denial(secret, result.isolation) in result.stderr


@root_only
async def test_network_sockets_cannot_reach_anything(pool: SandboxPool) -> None:
    # A local listener on the host: outside the sandbox's network namespace, so unreachable.
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = textwrap.dedent(
        f"""
        import socket
        s = socket.create_connection(('127.0.0.1', {port}), timeout=1)
        print('connected')
        """
    )
    try:
        report = await _hostile_with_neighbour(pool, code)
    finally:
        server.close()
        await server.wait_closed()
    result = report.outcomes[0].result
    assert result.isolation.network_isolated
    assert ("connected" not in result.stdout and "OSError" in result.stderr) or "Error" in result.stderr


SECCOMP_ARCHES = ("x86_64", "aarch64")


@pytest.mark.skipif(os.uname().machine not in SECCOMP_ARCHES, reason="no seccomp socket filter for this arch")
async def test_seccomp_fallback_denies_every_socket_but_socketpairs() -> None:
    """The fallback for hosts that refuse network namespaces, forced here: only the filter cuts the
    network. ``socket(AF_UNIX)`` is denied too (host Unix sockets); ``socketpair()`` is not."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = textwrap.dedent(
        f"""
        import socket
        a, b = socket.socketpair()  # AF_UNIX pairs: allowed
        a.sendall(b'unix ok'); print(b.recv(16).decode())
        for family in (socket.AF_INET, socket.AF_INET6, socket.AF_PACKET, socket.AF_NETLINK, socket.AF_UNIX):
            try:
                socket.socket(family, socket.SOCK_RAW if family == socket.AF_PACKET else socket.SOCK_STREAM)
                print('opened', family)
            except PermissionError:
                print('denied', int(family))
        try:
            socket.create_connection(('127.0.0.1', {port}), timeout=1)
            print('connected')
        except PermissionError:
            print('connect denied')
        """
    )
    try:
        with SandboxPool(max_concurrency=1, limits=LIMITS, network_methods=("seccomp",)) as seccomp_pool:
            report = await seccomp_pool.run(code, [AssertTest("pass")])
            good = await seccomp_pool.run(GOOD_CODE, GOOD_TESTS)
    finally:
        server.close()
        await server.wait_closed()
    result = report.outcomes[0].result
    assert result.exit_code == 0, result.stderr
    assert result.isolation.network_isolated and result.isolation.network_method == "seccomp"
    import socket

    families = (socket.AF_INET, socket.AF_INET6, socket.AF_PACKET, socket.AF_NETLINK, socket.AF_UNIX)
    assert result.stdout.split("\n")[:7] == [
        "unix ok",
        *(f"denied {int(f)}" for f in families),
        "connect denied",
    ], result.stdout
    assert good.all_passed, good.to_dict()  # ordinary programs run unhindered under the filter


def test_network_methods_are_validated() -> None:
    for bad in ((), "namespace", ("namespace", "firewall")):
        with pytest.raises(ConfigError, match="network_methods"):
            SandboxPool(max_concurrency=1, network_methods=bad)  # type: ignore[arg-type]


async def test_background_process_is_killed_after_the_run(pool: SandboxPool, tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import subprocess, sys
        # Leaves its session and outlives the run unless the sandbox sweeps it.
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print('started')
        """
    )
    report = await _hostile_with_neighbour(pool, code)
    result = report.outcomes[0].result
    assert "started" in result.stdout
    assert result.leftover_processes >= 1


async def test_printing_100_mb_is_cut_off(pool: SandboxPool) -> None:
    code = "import sys\nchunk = 'x' * (1024 * 1024)\nfor _ in range(100):\n    sys.stdout.write(chunk)\n"
    report = await _hostile_with_neighbour(pool, code)
    result = report.outcomes[0].result
    assert result.limit == "output" and result.stdout_truncated
    assert len(result.stdout) == LIMITS.stdout_bytes


async def test_cancelled_run_is_killed_and_cleaned_up(pool: SandboxPool) -> None:
    slow = SandboxLimits(cpu_s=1, wall_s=60)
    task = asyncio.create_task(pool.run(SLEEPER, ["pass"], limits=slow))
    await _until(lambda: _sleeper_pid(pool) is not None, slow.wall_s, "the program started")
    pid = _sleeper_pid(pool)
    assert pid is not None and _alive(pid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The pool's side of the run cleans up on its own loop, right after the cancellation reaches it.
    await _until(lambda: not _alive(pid) and _run_dirs(pool) == [], CLEANUP_GRACE_S, "cleanup")
    assert _slot_processes(pool) == 0
    report = await pool.run(GOOD_CODE, GOOD_TESTS)  # the slot went back to the pool
    assert report.all_passed
    _assert_no_unclosed_transports()


async def test_closing_the_pool_mid_run_reaps_everything_before_its_loop_closes() -> None:
    slow = SandboxLimits(cpu_s=1, wall_s=60)
    closing = SandboxPool(max_concurrency=2, limits=slow)
    base_dir = closing._base_dir
    uids = [] if closing._lease is None else list(closing._lease.uids)
    flood = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"  # output cut off, pipe busy
    tasks = [
        asyncio.create_task(closing.run(SLEEPER, ["pass"])),
        asyncio.create_task(closing.run(flood, ["pass"])),
    ]
    await _until(lambda: _sleeper_pid(closing) is not None, slow.wall_s, "the program started")
    pid = _sleeper_pid(closing)
    assert pid is not None
    await asyncio.to_thread(closing.close)
    assert closing._loop.is_closed()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert not _alive(pid) and not _exists(base_dir)
    assert sum(len(pids_of_uid(uid)) for uid in uids) == 0
    _assert_no_unclosed_transports()
    with pytest.raises(ConfigError, match="closed"):
        await closing.run(GOOD_CODE, GOOD_TESTS)


async def test_big_file_hits_the_file_size_limit(pool: SandboxPool) -> None:
    limits = SandboxLimits(cpu_s=1, wall_s=2.5, file_size_bytes=1024 * 1024)
    code = "open('big.bin', 'wb').write(b'x' * (8 * 1024 * 1024))\n"
    report = await pool.run(code, ["pass"], limits=limits)
    assert report.outcomes[0].result.limit == "file_size", report.to_dict()
    assert _run_dirs(pool) == []


async def test_all_or_nothing_stops_at_first_failure(pool: SandboxPool) -> None:
    report = await pool.run(GOOD_CODE, ["assert add(1, 1) == 3", *GOOD_TESTS], all_or_nothing=True)
    assert report.passed == 0 and report.skipped == 2 and len(report.outcomes) == 1


async def test_pool_bounds_concurrency() -> None:
    with SandboxPool(max_concurrency=1, limits=LIMITS) as single:
        # Each run prints when it started and ended (the host's clock, seen from inside).
        code = "import time\nstart = time.time()\ntime.sleep(0.2)\nprint(start, time.time())\n"
        reports = await asyncio.gather(*(single.run(code, ["pass"]) for _ in range(3)))
    spans = sorted(tuple(map(float, r.outcomes[0].result.stdout.split())) for r in reports)
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"two runs overlapped: {spans}"


def test_run_sync_from_plain_code(pool: SandboxPool) -> None:
    report = pool.run_sync(GOOD_CODE, GOOD_TESTS)
    assert report.all_passed


def test_test_parsing_and_output_matching() -> None:
    tests = parse_tests({"inputs": ["1\n", "2\n"], "outputs": ["1\n", "4\n"]})
    assert tests == [IOTest("1\n", "1\n"), IOTest("2\n", "4\n")]
    assert parse_tests([{"code": "assert True"}]) == [AssertTest("assert True")]
    with pytest.raises(DataError, match="at least one test"):
        parse_tests([])
    with pytest.raises(DataError, match=r"tests\[0\]"):
        parse_tests([42])  # type: ignore[list-item]
    assert outputs_match("a  \nb\n\n", "a\nb")
    assert not outputs_match("a\nb", "a\nc")
    with pytest.raises(ConfigError, match="wall_s"):
        SandboxLimits(wall_s=0)
