"""Process CPU time spent in the garbage collector, for the engine benchmarks."""

from __future__ import annotations

import time
from typing import Any


class GCTimer:
    """Process CPU time spent in the garbage collector, through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started
