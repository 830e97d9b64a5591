"""Macro-batch preprocessing of an algorithm (``AlgorithmSpec.preprocess``): ``SAWBatch → SAWBatch``.

Preprocessing sees the whole macro-batch before it is split into micro-batches, which is where
batch-wide statistics belong: the REINFORCE baseline is the mean weight of the *macro*-batch (the
original subtracted a per-micro-batch mean inside the loss, so the baseline changed with the token
budget). Each step is a small frozen callable, so an algorithm's repr says what it does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import attrs

from ludic_core.errors import ConfigError
from ludic_core.saw import SAWBatch

__all__ = ["ComposedPreprocess", "DropZeroWeight", "Preprocess", "SubtractBaseline", "compose_preprocess"]

Preprocess = Callable[[SAWBatch], SAWBatch]


@attrs.frozen
class DropZeroWeight:
    """Keep items with ``|weight| > eps`` (they carry no policy-gradient signal); meta counts the drops."""

    eps: float = 1e-4

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise ConfigError(f"DropZeroWeight.eps must be finite and >= 0, got {self.eps!r}")

    def __call__(self, batch: SAWBatch) -> SAWBatch:
        kept = [item for item in batch.items if abs(item.weight) > self.eps]
        meta = dict(batch.meta)
        meta["num_dropped_zero_weight"] = (
            meta.get("num_dropped_zero_weight", 0) + len(batch.items) - len(kept)
        )
        return SAWBatch(items=kept, meta=meta)


@attrs.frozen
class SubtractBaseline:
    """``w ← w − mean(w)`` over the macro-batch, then ``÷ (std(w) + eps)`` when ``normalize``.

    Meta records ``baseline`` (the mean) and ``baseline_std`` (population std before normalising).
    """

    normalize: bool = False
    eps: float = 1e-8

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ConfigError(f"SubtractBaseline.eps must be finite and > 0, got {self.eps!r}")

    def __call__(self, batch: SAWBatch) -> SAWBatch:
        if not batch.items:
            return batch
        weights = [item.weight for item in batch.items]
        mean = math.fsum(weights) / len(weights)
        std = math.sqrt(math.fsum((w - mean) ** 2 for w in weights) / len(weights))
        scale = std + self.eps if self.normalize else 1.0
        items = [attrs.evolve(item, weight=(item.weight - mean) / scale) for item in batch.items]
        return SAWBatch(items=items, meta={**batch.meta, "baseline": mean, "baseline_std": std})


def _steps(values: Iterable[Preprocess]) -> tuple[Preprocess, ...]:
    return tuple(values)


@attrs.frozen
class ComposedPreprocess:
    """Apply ``steps`` in order."""

    steps: tuple[Preprocess, ...] = attrs.field(converter=_steps)

    def __call__(self, batch: SAWBatch) -> SAWBatch:
        for step in self.steps:
            batch = step(batch)
        return batch


def compose_preprocess(*steps: Preprocess | None) -> Preprocess | None:
    """Chain preprocessing steps left to right, skipping ``None``; ``None`` when nothing is left."""
    real = [step for step in steps if step is not None]
    if not real:
        return None
    return real[0] if len(real) == 1 else ComposedPreprocess(real)
