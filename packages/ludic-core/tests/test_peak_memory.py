"""Peak resident memory over a window: a reset forgets an earlier, larger peak; the peak sees what the
window allocated."""

from __future__ import annotations

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
