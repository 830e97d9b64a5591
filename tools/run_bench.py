"""Run every benchmark script in bench/ and check that each prints exactly one JSON object.

Run by the ``bench`` nox session. A benchmark is ``bench/<name>.py`` (files starting with ``_`` are
shared helpers and are not run). Its stdout must be one JSON object (logs go to stderr), and it
reports ratios against a baseline measured in the same process, since absolute times on shared
machines drift. The collected results are printed and,
with ``--out``, written as one JSON object keyed by benchmark name.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def discover(bench_dir: Path) -> list[Path]:
    return sorted(path for path in bench_dir.glob("*.py") if not path.name.startswith("_"))


def run_one(script: Path, timeout_s: float) -> tuple[dict[str, object] | None, str]:
    """Return (result, problem); exactly one of them is meaningful."""
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
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
    print(f"{script.name}: ok in {elapsed:.1f} s")
    return result, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-dir", type=Path, default=Path("bench"))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per benchmark script")
    parser.add_argument("--out", type=Path, default=None, help="write all results to this JSON file")
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

    results: dict[str, dict[str, object]] = {}
    problems: list[str] = []
    for script in scripts:
        result, problem = run_one(script, args.timeout)
        if result is None:
            problems.append(problem)
        else:
            results[script.stem] = result

    print(json.dumps(results, indent=2, sort_keys=True))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
