"""Run every benchmark script in bench/ and check that each prints one conforming JSON object.

Run by the ``bench`` nox session. A benchmark is ``bench/<name>.py`` (files starting with ``_`` are
shared helpers and are not run). Its stdout must be one JSON object (logs go to stderr) that says where
and how it ran (``machine``: the date, the CPU, the load average and the command, written by
``bench/_machine.py``'s ``emit``) and, unless it was skipped, holds a non-empty ``headline``: what
``tools/benchmarks_page.py`` shows when the object is kept as ``bench/results/<name>.json``. It reports
ratios against a baseline measured in the same process, since absolute times on shared machines drift.

Each script runs under ``tools/peak_rss.py``, which records the peak resident memory of the script and
everything it starts and fails it above ``--limit-gb`` (the limit the docs promise for every command);
the reading is added to the script's result as ``peak_rss``. The collected results are printed and,
with ``--out``, written as one JSON object keyed by benchmark name; ``--save-results`` also writes each
as ``bench/results/<name>.json`` for the benchmarks page.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEAK_RSS = Path(__file__).resolve().parent / "peak_rss.py"
# What every result's `machine` must say (bench/_machine.py writes these and more).
MACHINE_KEYS = ("date", "cpu", "load_average", "command")


def discover(bench_dir: Path) -> list[Path]:
    return sorted(path for path in bench_dir.glob("*.py") if not path.name.startswith("_"))


def conformance_problem(result: dict[str, Any]) -> str:
    """What the result lacks to be shown on the benchmarks page ('' when nothing)."""
    machine = result.get("machine")
    if not isinstance(machine, dict):
        return "no `machine` object (print the result with bench/_machine.py's emit)"
    missing = [key for key in MACHINE_KEYS if key not in machine]
    if missing:
        return f"`machine` lacks {', '.join(missing)}"
    if "skipped" in result:
        return ""
    headline = result.get("headline")
    if not isinstance(headline, dict) or not headline:
        return "no non-empty `headline` object (the numbers the benchmarks page shows)"
    return ""


def run_one(
    script: Path, timeout_s: float, *, limit_gb: float, record_dir: Path
) -> tuple[dict[str, Any] | None, str]:
    """Return (result, problem); exactly one of them is meaningful."""
    started = time.perf_counter()
    command = [
        sys.executable,
        str(PEAK_RSS),
        f"--name={script.stem}",
        f"--limit-gb={limit_gb}",
        f"--record-dir={record_dir}",
        "--",
        sys.executable,
        str(script),
    ]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{script.name}: no result after {timeout_s:.0f} s"
    elapsed = time.perf_counter() - started
    if completed.stderr:
        sys.stderr.write(completed.stderr)
    if completed.returncode != 0:
        return None, f"{script.name}: exited {completed.returncode} after {elapsed:.1f} s"
    stdout = completed.stdout.strip()
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError as error:
        return None, f"{script.name}: stdout is not one JSON object ({error}); stdout was {stdout[:500]!r}"
    if not isinstance(result, dict):
        return None, f"{script.name}: stdout is JSON but not an object: {stdout[:200]!r}"
    problem = conformance_problem(result)
    if problem:
        return None, f"{script.name}: {problem}"
    record = json.loads((record_dir / f"{script.stem}.json").read_text(encoding="utf-8"))
    result["peak_rss"] = {key: record[key] for key in ("tree_peak_mb", "process_peak_mb", "limit_mb")}
    print(f"{script.name}: ok in {elapsed:.1f} s")
    return result, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bench-dir", type=Path, default=Path("bench"))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per benchmark script")
    parser.add_argument("--out", type=Path, default=None, help="write all results to this JSON file")
    parser.add_argument(
        "--save-results",
        action="store_true",
        help="also write each result as <bench-dir>/results/<name>.json (the benchmarks page's source)",
    )
    parser.add_argument("--limit-gb", type=float, default=4.0, help="peak resident memory allowed per script")
    parser.add_argument(
        "--record-dir", type=Path, default=None, help="peak_rss records (default: a temporary directory)"
    )
    parser.add_argument("names", nargs="*", help="run only these benchmarks (file stems)")
    args = parser.parse_args(argv)

    scripts = discover(args.bench_dir)
    if args.names:
        wanted = set(args.names)
        unknown = wanted - {script.stem for script in scripts}
        if unknown:
            print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        scripts = [script for script in scripts if script.stem in wanted]

    results: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ludic-bench-memory-") as scratch:
        record_dir = args.record_dir or Path(scratch)
        for script in scripts:
            result, problem = run_one(script, args.timeout, limit_gb=args.limit_gb, record_dir=record_dir)
            if result is None:
                problems.append(problem)
            else:
                results[script.stem] = result

    print(json.dumps(results, indent=2, sort_keys=True))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if args.save_results:
        kept = args.bench_dir / "results"
        kept.mkdir(parents=True, exist_ok=True)
        for name, result in results.items():
            if "skipped" not in result:
                (kept / f"{name}.json").write_text(json.dumps(result) + "\n", encoding="utf-8")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
