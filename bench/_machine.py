"""Where and how a benchmark ran, for its JSON: the machine, its load, the command."""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import sys
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, Any]:
    """CPU model and count, memory, the 1/5/15-minute load averages when the run started, Python, and
    the command line that ran the benchmark."""
    facts: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": shlex.join([os.path.basename(sys.executable), *sys.argv]),
    }
    if hasattr(os, "getloadavg"):
        facts["load_average"] = [round(value, 2) for value in os.getloadavg()]
    with contextlib.suppress(ValueError, OSError):
        facts["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return facts


def reset_peak_rss() -> None:
    """Start a new peak-RSS window for :func:`peak_rss_mb` (Linux: resets the process's VmHWM)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


def peak_rss_mb() -> float:
    """The process's peak resident memory (MiB) since it started or since :func:`reset_peak_rss`."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmHWM line in /proc/self/status")
