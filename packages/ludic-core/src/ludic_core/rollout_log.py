"""An append-only JSONL log of rollouts (one :func:`~ludic_core.serialization.rollout_to_json` line each).

Appends are safe under concurrency: all lines of one call go out in a single ``write`` on a file
descriptor opened with ``O_APPEND`` (the kernel picks the offset atomically, so writers in other
processes cannot land in the middle of a line), and a lock serialises writers inside this process
should a very large write be split. Files written by one run can be appended to by the next.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from ludic_core.jsonl import read_jsonl
from ludic_core.serialization import rollout_from_json, rollout_to_json
from ludic_core.types import Rollout

__all__ = ["RolloutLog", "read_rollouts"]


class RolloutLog:
    """Appends rollouts to ``path`` (its directory is created)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, rollouts: Iterable[Rollout]) -> int:
        """Append one line per rollout; returns the number of lines written."""
        lines = [rollout_to_json(r) for r in rollouts]
        if not lines:
            return 0
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            finally:
                os.close(fd)
        return len(lines)

    def __repr__(self) -> str:
        return f"RolloutLog({str(self.path)!r})"


def read_rollouts(path: str | os.PathLike[str]) -> Iterator[Rollout]:
    """Yield the rollouts of a JSONL log in file order; a bad line raises naming ``file:line``."""
    return read_jsonl(path, rollout_from_json)
