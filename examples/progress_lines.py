"""Progress lines for a run whose output is not a terminal (CI logs, ``nohup``, a pipe).

There rich draws no live panel and no spinner, so a long evaluation or training stage would print nothing
for minutes. :class:`ProgressLines` prints one line when a phase starts and then one at least every
``every_s`` seconds while it lasts, from a daemon thread, so a line comes even while one long call (a
batch of generation, an optimiser step) holds the event loop::

    [progress] 95 s | GRPO | step 3/5
    [progress] 310 s | evaluation: GRPO | sampled games 40/150
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

__all__ = ["ProgressLines", "StepProgress"]


class ProgressLines:
    """``phase(name, step=, total=)`` starts a phase; ``detail(text)`` updates what the next line says
    about it; ``close()`` stops the thread. A disabled one (``enabled=False``: the run has a terminal)
    prints nothing and starts no thread."""

    def __init__(self, *, every_s: float, enabled: bool, stream: IO[str] | None = None) -> None:
        if not every_s > 0:
            raise ValueError(f"ProgressLines: every_s must be > 0 seconds, got {every_s!r}")
        self.every_s = every_s
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stdout
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._phase = "starting"
        self._step = ""
        self._detail = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if enabled:
            self._thread = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
            self._thread.start()

    def phase(self, name: str, *, step: int | None = None, total: int | None = None) -> None:
        with self._lock:
            self._phase = name
            self._step = "" if step is None else f"step {step}" + ("" if total is None else f"/{total}")
            self._detail = ""
        self._print()

    def detail(self, text: str) -> None:
        with self._lock:
            self._detail = text

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every_s + 1)

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s):
            self._print()

    def _print(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            parts = [
                f"[progress] {time.monotonic() - self._started:.0f} s",
                self._phase,
                self._step,
                self._detail,
            ]
        print(" | ".join(p for p in parts if p), file=self.stream, flush=True)


class StepProgress:
    """A trainer logger (for a :class:`~ludic_core.loggers.tee.TeeLogger`) that starts the phase of the
    next step each time a step is logged."""

    def __init__(self, lines: ProgressLines, stage: str, total_steps: int) -> None:
        self.lines = lines
        self.stage = stage
        self.total_steps = total_steps
        lines.phase(stage, step=1, total=total_steps)

    def log(self, step: int, stats: Mapping[str, Any]) -> None:
        if step < self.total_steps and any(key.startswith("train/") for key in stats):
            self.lines.phase(self.stage, step=step + 1, total=self.total_steps)

    def close(self) -> None:
        return None
