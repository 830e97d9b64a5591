"""Console loggers: a rich live panel with a progress bar, and a plain one-line-per-step printer."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ludic_core.loggers.base import PREFIXES, is_number

__all__ = ["STEP_SUMMARY", "PrintLogger", "RichConsoleLogger", "sparkline"]

STEP_SUMMARY: dict[str, str] = {
    "train/avg_total_reward": "reward",
    "train/loss": "loss",
    "perf/step_s": "step_s",
    "eval/accuracy": "eval_accuracy",
    "eval/reward_mean": "eval_reward",
}
"""The key numbers of a training step and an evaluation, with their short labels: what a training
command prints per step (``PrintLogger(labels=STEP_SUMMARY)``); every metric goes to the metrics file."""

_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """Unicode sparkline of ``values`` scaled to their own min/max."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return _SPARKS[len(_SPARKS) // 2] * len(values)
    return "".join(_SPARKS[int((v - lo) / (hi - lo) * (len(_SPARKS) - 1))] for v in values)


def _fmt(value: Any, precision: int) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 10 ** (-precision)):
            return f"{value:.{precision}g}"
        return f"{value:.{precision}f}"
    return str(value)


class PrintLogger:
    """One line per call: ``[trainer] step 3 | train/loss=0.1234 | ...`` (``keys`` filters and orders;
    None: every key). ``labels`` maps keys to the short names printed instead, and without ``keys``
    also picks and orders them (:data:`STEP_SUMMARY`: ``step 3 | reward=0.5 | loss=0.1 | step_s=2.1``);
    a call that has none of the chosen keys prints nothing."""

    def __init__(
        self,
        *,
        prefix: str = "[trainer]",
        keys: Sequence[str] | None = None,
        labels: Mapping[str, str] | None = None,
        precision: int = 4,
        stream: IO[str] | None = None,
    ) -> None:
        self.prefix = prefix
        self.labels = dict(labels or {})
        self.keys = list(keys) if keys is not None else (list(self.labels) if labels is not None else None)
        self.precision = precision
        self.stream = stream or sys.stdout

    def log(self, step: int, stats: Mapping[str, Any]) -> None:
        keys = [k for k in self.keys if k in stats] if self.keys is not None else sorted(stats)
        if not keys and self.keys is not None:
            return
        parts = [f"{self.labels.get(k, k)}={_fmt(stats[k], self.precision)}" for k in keys]
        print(" | ".join([f"{self.prefix} step {step}", *parts]), file=self.stream, flush=True)

    def close(self) -> None:
        return None


class RichConsoleLogger:
    """A live terminal panel: a progress bar over ``total_steps`` and the latest ``train/``, ``eval/``
    and ``perf/`` metrics side by side, with a sparkline of ``spark_key``'s history.

    The live display starts on the first ``log`` and stops on ``close`` (or when used as a context
    manager). When stdout is not a terminal, rich renders the final state only, so CI logs stay short.
    """

    def __init__(
        self,
        *,
        total_steps: int | None = None,
        keys: Sequence[str] | None = None,
        spark_key: str = "train/avg_total_reward",
        history: int = 60,
        precision: int = 4,
        title: str = "Ludic training",
        console: Any = None,
    ) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console or Console()
        self.keys = list(keys) if keys is not None else None
        self.spark_key = spark_key
        self.precision = precision
        self.title = title
        self._history: deque[float] = deque(maxlen=history)
        self._latest: dict[str, Any] = {}
        self._step = 0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
        )
        self._task = self._progress.add_task("steps", total=total_steps)
        self._live: Any = None

    def set_total(self, total_steps: int, *, completed: int | None = None) -> None:
        self._progress.update(self._task, total=total_steps, completed=completed)
        self._refresh()

    def log(self, step: int, stats: Mapping[str, Any]) -> None:
        self._step = step
        self._latest.update(stats)
        value = stats.get(self.spark_key)
        if is_number(value):
            self._history.append(float(value))  # type: ignore[arg-type]
        if any(k.startswith("train/") for k in stats):
            self._progress.update(self._task, completed=step)
        self._refresh()

    def _render(self) -> Any:
        from rich.columns import Columns
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        tables = []
        keys = self.keys if self.keys is not None else sorted(self._latest)
        for prefix in PREFIXES:
            rows = [
                (key[len(prefix) :], _fmt(self._latest[key], self.precision))
                for key in keys
                if key.startswith(prefix) and key in self._latest
            ]
            if not rows:
                continue
            table = Table(title=prefix.rstrip("/"), show_header=False, box=None)
            table.add_column("metric", style="cyan", no_wrap=True)
            table.add_column("value", justify="right", no_wrap=True)
            for row in rows:
                table.add_row(*row)
            tables.append(table)
        # Side by side where they fit, else the next group goes below: no value is cut at 80 columns.
        columns = Columns(tables, padding=(0, 3))
        parts: list[Any] = [self._progress, columns]
        if self._history:
            last = self._history[-1]
            parts.append(f"{self.spark_key} {sparkline(list(self._history))} {_fmt(last, self.precision)}")
        return Panel(Group(*parts), title=f"{self.title} — step {self._step}")

    def _refresh(self) -> None:
        from rich.live import Live

        if self._live is None:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        else:
            self._live.update(self._render())

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None
            if not self.console.is_terminal:
                # rich ends the final panel's last line only on a terminal: what is printed next would
                # otherwise continue that line.
                self.console.line()

    def __enter__(self) -> RichConsoleLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
