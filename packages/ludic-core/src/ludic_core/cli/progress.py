"""A progress bar on stderr: rich's when rich is installed and stderr is a terminal, otherwise a plain
line at every tenth of the work (logs and CI stay readable)."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

__all__ = ["Progress"]


class Progress:
    """``with Progress("eval", total) as bar: bar.advance()``."""

    def __init__(self, label: str, total: int, *, done: int = 0) -> None:
        self.label = label
        self.total = total
        self.done = done
        self._rich: Any = None
        self._task: Any = None
        self._started = time.monotonic()
        self._next_line = 0

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            try:
                from rich.progress import Progress as RichProgress
            except ImportError:
                pass
            else:
                self._rich = RichProgress(transient=False)
                self._rich.start()
                self._task = self._rich.add_task(self.label, total=self.total, completed=self.done)
                return self
        self._line()
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
        else:
            self._line()

    def _line(self) -> None:
        if self.done < self._next_line and self.done < self.total:
            return
        elapsed = time.monotonic() - self._started
        print(
            f"{self.label}: {self.done}/{self.total} episodes ({elapsed:.1f} s)", file=sys.stderr, flush=True
        )
        self._next_line = self.done + max(1, self.total // 10)

    def __exit__(
        self, _type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self._rich is not None:
            self._rich.stop()
