"""Run several commands at once and fail if any fails: ``run_side_by_side.py NAME=COMMAND ...``.

CI's learning checks (the demo, self-play and tool use on SmolLM2) are each one process that uses
about one core well; run one after another on a 2-core machine they leave a core idle. Each command's
output goes to its own log, printed whole (under a header) when the command ends, so the CI log reads
command by command; a line every ``--heartbeat`` seconds says which are still running. Exits with the
first non-zero status among the commands (after all of them end), naming each that failed.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _parse(spec: str) -> tuple[str, list[str]]:
    name, sep, command = spec.partition("=")
    if not sep or not name or not command.strip():
        raise SystemExit(f"run_side_by_side: expected NAME=COMMAND, got {spec!r}")
    return name, shlex.split(command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="+", metavar="NAME=COMMAND")
    parser.add_argument("--heartbeat", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds before every command is killed"
    )
    args = parser.parse_args(argv)
    commands = [_parse(spec) for spec in args.commands]
    logs = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    started = time.monotonic()
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name, command in commands:
        log = logs / f"{name}.log"
        with log.open("wb") as out:
            running[name] = (subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), log)
        print(f"[{name}] started: {shlex.join(command)}", flush=True)
    failed: list[tuple[str, int]] = []
    next_beat = started + args.heartbeat
    while running:
        time.sleep(1.0)
        now = time.monotonic()
        for name, (process, log) in list(running.items()):
            status = process.poll()
            if status is None and now - started > args.timeout:
                process.kill()
                status = process.wait()
                print(f"[{name}] killed after {args.timeout:.0f} s", flush=True)
            if status is None:
                continue
            del running[name]
            print(f"\n===== [{name}] exit {status} after {now - started:.0f} s =====", flush=True)
            sys.stdout.write(log.read_text(errors="replace"))
            print(f"===== [{name}] end =====\n", flush=True)
            if status != 0:
                failed.append((name, status))
        if running and now >= next_beat:
            print(f"still running after {now - started:.0f} s: {', '.join(sorted(running))}", flush=True)
            next_beat = now + args.heartbeat
    if failed:
        print("failed: " + ", ".join(f"{name} (exit {status})" for name, status in failed), flush=True)
        return failed[0][1]
    print(f"all {len(commands)} passed in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
