"""Append metrics to a JSON-lines file, one object per ``log`` call, flushed at once."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["JsonlLogger"]


class JsonlLogger:
    """Each line is ``{"step": n, "time": unix_s, **stats}``. The file is opened in append mode, so a
    resumed run continues the same file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def log(self, step: int, stats: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"JsonlLogger({self.path}) is closed")
        record = {"step": step, "time": time.time(), **{k: _jsonable(v) for k, v in stats.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        return item()
    return str(value)
