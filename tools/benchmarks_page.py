"""Write docs/benchmarks.md from the benchmark results kept in bench/results/*.json.

Each result file is the JSON object a ``bench/*.py`` script printed, saved as it was measured. The page
gives, per file: when, where (CPU, cores, load average) and with which command it ran, and its
``headline`` table. Measured numbers are stated here and nowhere else, so they never drift from the
JSON they come from.

    python tools/benchmarks_page.py           # rewrite docs/benchmarks.md
    python tools/benchmarks_page.py --check   # exit 1 if docs/benchmarks.md is not what the JSON gives
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"

INTRO = """# Benchmarks

Every number on this page comes from a JSON file in `bench/results/`, written by the `bench/` script
named beside it (`python tools/benchmarks_page.py` rebuilds the page; the `docs` session checks that it
is current). The machines are shared and their speed drifts, so each benchmark measures its baseline in
the same run and the ratios are what carry over; absolute seconds hold for the machine and load shown.

Every `bench/*.py` prints one JSON object with its machine, load average, command and headline;
`python tools/run_bench.py --save-results [NAME ...]` runs them (each under `tools/peak_rss.py`, within
the 4 GiB the docs promise for every command) and keeps each result here. The GPU check,
`python tools/gpu_check.py --save-result` on a machine with a CUDA GPU and vLLM's CUDA build, runs the
`gpu`-marked tests, the trainer and local-sampler benchmarks on CUDA, the weight-sync benchmark and three
steps of `ludic train tictactoe-grpo backend.kind=vllm` in at most 8 minutes, and keeps its summary (step time,
trained and sampled tokens/s, weight-push time) as `bench/results/gpu_check.json`;
`python tools/gpu_check.py --dry-run` runs every step at a CPU-sized stand-in (the `examples` session
does, so the check cannot rot).
"""


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _summary(name: str) -> list[str]:
    """The first paragraph of the benchmark script's docstring, then a blank line (nothing if absent)."""
    script = ROOT / "bench" / f"{name}.py"
    if not script.exists():
        return []
    docstring = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    first = docstring.split("\n\n")[0].strip()
    return [" ".join(first.split()), ""] if first else []


def section(name: str, result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    headline = result.get("headline")
    if not isinstance(headline, dict) or not headline:
        raise ValueError(f"bench/results/{name}.json has no 'headline' object to show")
    load = machine.get("load_average")
    where = ", ".join(
        part
        for part in (
            machine.get("cpu"),
            f"{machine['cpus']} cores" if machine.get("cpus") else None,
            f"{machine['memory_gib']} GiB" if machine.get("memory_gib") else None,
            f"load average {' / '.join(str(v) for v in load)} (1/5/15 min)" if load else None,
            f"Python {machine['python']}" if machine.get("python") else None,
        )
        if part
    )
    lines = [
        f"## {name}",
        "",
        *_summary(name),
        f"Measured {machine.get('date', 'at an unrecorded date')} on {where or 'an unrecorded machine'}:",
        "",
        "```bash",
        machine.get("command", f"python bench/{name}.py"),
        "```",
        "",
        "| measure | value |",
        "| --- | --- |",
        *(f"| {key} | {_format(value)} |" for key, value in headline.items()),
    ]
    return "\n".join(lines) + "\n"


def render() -> str:
    files = sorted(RESULTS.glob("*.json"))
    parts = [INTRO]
    for path in files:
        parts.append(section(path.stem, json.loads(path.read_text(encoding="utf-8"))))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if the page is stale instead of writing it"
    )
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python tools/benchmarks_page.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} from {len(list(RESULTS.glob('*.json')))} result files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
