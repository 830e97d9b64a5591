"""Print the failed tests of a nox run, from the JUnit XML files its pytest runs wrote.

A full CI run prints tens of thousands of lines, and only its tail is kept where CI failures are read:
a session's failure, printed minutes earlier, is lost there. ``.ci/run`` calls this after a failed
``nox`` so that each failed test, its error and the tail of its captured output end the log.

    python tools/print_test_failures.py .test-reports
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TRACEBACK_LINES = 30
OUTPUT_LINES = 15
MAX_FAILURES = 6
_SECTION = re.compile(r"-+ Captured \w+ -+")


def failures(report: Path) -> list[tuple[str, str]]:
    """(test id, what to print) for each failed or erroring test case of one JUnit XML report.

    What to print: the error's one-line message, the tail of its traceback, then the tail of each
    output the test captured (the reports record it for failed tests only).
    """
    found = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        captured = [
            f"--- captured {stream.tag}\n{tail(text, OUTPUT_LINES)}"
            for stream in case
            if stream.tag in {"system-out", "system-err"} and (text := _without_headers(stream.text or ""))
        ]
        for problem in (*case.findall("failure"), *case.findall("error")):
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
            message = (problem.get("message") or "").strip().partition("\n")[0]
            parts = [f"{problem.tag}: {message}", tail(problem.text or "", TRACEBACK_LINES)]
            found.append((test_id, "\n".join([*parts, *captured])))
    return found


def _without_headers(text: str) -> str:
    """A captured stream without pytest's "--- Captured Out ---" section lines and blank lines."""
    kept = [line for line in text.splitlines() if line.strip() and not _SECTION.fullmatch(line.strip())]
    return "\n".join(kept)


def tail(text: str, lines: int) -> str:
    kept = text.rstrip().splitlines()
    skipped = len(kept) - lines
    return "\n".join(([f"[... {skipped} lines above ...]"] if skipped > 0 else []) + kept[-lines:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=Path, help="the folder of JUnit XML files, one per nox session")
    args = parser.parse_args()
    reports = sorted(args.reports.glob("*.xml")) if args.reports.is_dir() else []
    found = [(report.stem, *failure) for report in reports for failure in failures(report)]
    if not found:
        print(f"no failed test in the JUnit reports under {args.reports} (a session failed outside pytest)")
        return 0
    print(f"\n==== {len(found)} failed test(s); the first {min(len(found), MAX_FAILURES)} in full ====")
    for session, test_id, _ in found:
        print(f"FAILED [{session}] {test_id}")
    for session, test_id, text in found[:MAX_FAILURES]:
        print(f"\n==== [{session}] {test_id}\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
