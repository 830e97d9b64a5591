"""The logger contract and the canonical metric-key prefixes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

__all__ = ["PREFIXES", "TrainingLogger", "canonical_key", "canonicalize"]

PREFIXES = ("train/", "eval/", "perf/")


@runtime_checkable
class TrainingLogger(Protocol):
    """Receives one flat mapping of metrics per call; ``step`` is the trainer step."""

    def log(self, step: int, stats: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def canonical_key(key: str) -> str:
    """Put a bare metric under ``train/`` (already-prefixed keys pass through)."""
    if key.startswith(PREFIXES):
        return key
    if key.startswith("eval_"):
        return "eval/" + key[len("eval_") :]
    if key.startswith("perf_"):
        return "perf/" + key[len("perf_") :]
    return "train/" + key


def canonicalize(stats: Mapping[str, float]) -> dict[str, float]:
    return {canonical_key(k): v for k, v in stats.items()}


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))
