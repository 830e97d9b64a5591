"""Run a command and record the peak resident memory of it and everything it starts.

    python tools/peak_rss.py --name demo --limit-gb 4 --record-dir .test-reports/memory -- python examples/demo.py

Two readings, both in MiB:

* ``tree_peak_mb`` — the largest sum over the command's process tree (servers and workers the command
  starts count with it) of each process's proportional set size (PSS: a page shared by k processes
  counts 1/k in each, so the libraries that a server's processes all map count once; where the system
  reports no PSS, the resident set size). The tree's RSS is sampled every ``--interval`` seconds, and its
  PSS, which is costly to read, when the RSS says a new peak is possible, at most once a second;
* ``process_peak_mb`` — the kernel's exact high-water mark of the largest single process in the tree
  (``ru_maxrss`` of the waited-for children), which catches a spike shorter than the sampling
  interval; a program that resets its own mark (the demo measures each stage so) reports here only
  its last window, and the sampled tree peak covers the rest.

The record (JSON: name, command, both readings, the limit, the wall time, the exit status, the machine's
load) goes to ``<record-dir>/<name>.json``; ``python tools/peak_rss.py --summary <record-dir>`` prints
every record as one table (``.ci/run`` does, at the end). The exit status is the command's own when
it fails; when it succeeds but ``max(tree_peak_mb, process_peak_mb)`` exceeds the limit, it is 3 and
the reason is printed. psutil (needed for measuring, not for ``--summary``) reads the process tree.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

EXCEEDED = 3


# Reading one process's PSS walks its page tables (about 90 ms for a 1.8 GB torch process, holding the
# lock its own page faults need), so PSS is read only when the cheap RSS sum says a new peak is possible
# (PSS <= RSS for every process), and at most once per PSS_INTERVAL_S.
PSS_INTERVAL_S = 1.0


def _tree(root: psutil.Process) -> list[psutil.Process]:
    import psutil

    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _tree_sum(processes: list[psutil.Process], *, proportional: bool) -> int:
    """The tree's summed PSS (where the system reports it, else RSS) or, cheaply, its summed RSS."""
    import psutil

    total = 0
    for process in processes:
        try:
            if proportional:
                pss = getattr(process.memory_full_info(), "pss", None)
                if pss is not None:
                    total += int(pss)
                    continue
            total += int(process.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


def measure(command: list[str], *, interval: float) -> tuple[int, float, float, float]:
    """Run ``command``; its exit status, tree peak (MiB), largest process peak (MiB), wall seconds."""
    import psutil  # only here: --summary runs on any Python

    start = time.monotonic()
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    peak = 0
    last_pss = -PSS_INTERVAL_S
    while child.poll() is None:
        processes = _tree(root)
        now = time.monotonic()
        if _tree_sum(processes, proportional=False) > peak and now - last_pss >= PSS_INTERVAL_S:
            peak = max(peak, _tree_sum(processes, proportional=True))
            last_pss = now
        time.sleep(interval)
    wall = time.monotonic() - start
    # ru_maxrss: KiB on Linux, bytes on macOS; the largest of the children waited for (and theirs).
    children_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    process_mb = children_peak / (2**20 if sys.platform == "darwin" else 2**10)
    return child.returncode, peak / 2**20, process_mb, wall


def summarize(record_dir: Path) -> None:
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(record_dir.glob("*.json"))]
    if not records:
        print(f"peak_rss: no records in {record_dir}")
        return
    print(f"peak resident memory of the documented commands (MiB; limit {records[0]['limit_mb']:.0f})")
    for record in sorted(records, key=lambda r: -max(r["tree_peak_mb"], r["process_peak_mb"])):
        peak = max(record["tree_peak_mb"], record["process_peak_mb"])
        print(f"  {peak:7.0f}  {record['wall_s']:6.0f} s  {record['name']}")


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--summary"]:
        if len(argv) != 2:
            print("usage: peak_rss.py --summary RECORD_DIR", file=sys.stderr)
            return 2
        summarize(Path(argv[1]))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--name", required=True, help="the record's name (file <name>.json)")
    parser.add_argument("--limit-gb", type=float, required=True, help="fail above this many GiB")
    parser.add_argument("--record-dir", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between tree samples")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --")
    if args.limit_gb <= 0:
        parser.error(f"--limit-gb must be > 0, got {args.limit_gb}")
    status, tree_mb, process_mb, wall = measure(command, interval=args.interval)
    limit_mb = args.limit_gb * 1024
    peak_mb = max(tree_mb, process_mb)
    record = {
        "name": args.name,
        "command": command,
        "cwd": os.getcwd(),
        "tree_peak_mb": round(tree_mb, 1),
        "process_peak_mb": round(process_mb, 1),
        "limit_mb": limit_mb,
        "wall_s": round(wall, 1),
        "exit_status": status,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    args.record_dir.mkdir(parents=True, exist_ok=True)
    (args.record_dir / f"{args.name}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(
        f"peak_rss {args.name}: {peak_mb:.0f} MiB (tree {tree_mb:.0f}, largest process {process_mb:.0f}; "
        f"limit {limit_mb:.0f}) in {wall:.0f} s, exit status {status}",
        file=sys.stderr,  # stdout is the command's own (a benchmark's JSON)
        flush=True,
    )
    if status != 0:
        return status
    if peak_mb > limit_mb:
        print(
            f"peak_rss {args.name}: {peak_mb:.0f} MiB exceeds the {args.limit_gb:g} GiB limit",
            file=sys.stderr,
        )
        return EXCEEDED
    return 0


if __name__ == "__main__":
    sys.exit(main())
