"""Where and how a benchmark ran, for its JSON: the machine, its load, the command; and the one JSON
object a benchmark prints (``tools/run_bench.py`` checks it, ``tools/benchmarks_page.py`` shows it)."""

from __future__ import annotations

import contextlib
import datetime
import json
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
    """When, on what (CPU model and count, memory, the 1/5/15-minute load averages as the run started,
    Python) and by which command line the benchmark ran."""
    facts: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
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


def emit(result: dict[str, Any], *, facts: dict[str, Any], headline: dict[str, Any] | None) -> None:
    """Print ``result`` as the benchmark's one JSON object (stdout holds nothing else), with
    ``machine``: ``facts`` (taken as the run started) and the load average as it ended, and
    ``headline``: the few numbers the benchmarks page shows (``None`` only for a skipped run)."""
    machine = dict(facts)
    if hasattr(os, "getloadavg"):
        machine["load_average_end"] = [round(value, 2) for value in os.getloadavg()]
    out = {**result, "machine": machine}
    if headline is not None:
        out["headline"] = headline
    elif "skipped" not in result:
        raise ValueError(f"{result.get('benchmark')!r}: a result that is not skipped needs a headline")
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
