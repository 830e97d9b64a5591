"""Peak resident memory over a window: a reset forgets an earlier, larger peak; the peak sees what the
window allocated."""

from __future__ import annotations

import ctypes

import pytest

from ludic_core.peak_memory import peak_rss_mb, reset_peak_rss, resettable

MIB = 2**20


def _touch(mib: int) -> bytearray:
    block = bytearray(mib * MIB)
    for offset in range(0, len(block), 4096):  # resident only once written
        block[offset] = 1
    return block


@pytest.mark.skipif(not resettable(), reason="needs Linux /proc/self/clear_refs")
def test_a_reset_starts_a_new_window() -> None:
    reset_peak_rss()
    baseline = peak_rss_mb()
    block = _touch(256)
    big = peak_rss_mb()
    assert big >= baseline + 200
    del block
    reset_peak_rss()
    assert peak_rss_mb() < big - 150  # the earlier 256 MiB peak is forgotten once freed
    block = _touch(64)
    assert peak_rss_mb() >= baseline + 50
    del block


def test_the_peak_is_a_positive_number_without_a_reset() -> None:
    assert peak_rss_mb() > 0


_COUNT_ARENAS = """
import ctypes, sys, tempfile, threading
from ludic_core.peak_memory import limit_malloc_arenas
if sys.argv[1] == "limit":
    assert limit_malloc_arenas(1) is True
barrier = threading.Barrier(8)
def churn():
    barrier.wait()  # all eight allocate at once, which is when glibc hands out new arenas
    for _ in range(200):
        blocks = [bytearray(20_000) for _ in range(50)]
        del blocks
threads = [threading.Thread(target=churn) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile("r") as out:
    stream = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))
    print(out.read().count("<heap nr="))
"""


def _arenas(mode: str) -> int:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _COUNT_ARENAS, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_info"), reason="needs glibc")
def test_limit_malloc_arenas_keeps_threads_in_one_arena() -> None:
    assert _arenas("default") > 1  # concurrent threads get arenas of their own by default
    assert _arenas("limit") == 1


def test_limit_malloc_arenas_refuses_a_bad_count() -> None:
    from ludic_core.peak_memory import limit_malloc_arenas

    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="count must be an int >= 1"):
            limit_malloc_arenas(bad)  # type: ignore[arg-type]
