"""Process CPU time of a block, and the part of it spent in the garbage collector, for the engine
benchmarks."""

from __future__ import annotations

import gc
import time
from types import TracebackType
from typing import Any


class CPUTimer:
    """``with CPUTimer() as t:`` measures the block's process CPU time (``t.seconds``) and the CPU time
    the garbage collector took in it (``t.gc_seconds``, through ``gc.callbacks``).

    It collects the heap before the block: the collector's thresholds for a full collection depend on
    what survived the last one, so without this a measured side pays (or skips) a full collection
    because of the side that ran before it.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.gc_seconds = 0.0
        self._started = 0.0
        self._gc_started = 0.0

    def _on_collection(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.process_time()
        else:
            self.gc_seconds += time.process_time() - self._gc_started

    def __enter__(self) -> CPUTimer:
        gc.collect()
        gc.callbacks.append(self._on_collection)
        self._started = time.process_time()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.seconds = time.process_time() - self._started
        gc.callbacks.remove(self._on_collection)
