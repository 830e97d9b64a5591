"""Print a metrics table: rich's when installed and stdout is a terminal, else plain aligned text (what
scripts and tests read)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["format_value", "print_table"]


def format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "-" if value is None else str(value)


def print_table(title: str, rows: Sequence[tuple[str, object]]) -> None:
    if sys.stdout.isatty():
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            table = Table(title=title)
            table.add_column("metric")
            table.add_column("value", justify="right")
            for name, value in rows:
                table.add_row(name, format_value(value))
            Console().print(table)
            return
    width = max((len(name) for name, _ in rows), default=0)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {format_value(value)}")
    sys.stdout.flush()
