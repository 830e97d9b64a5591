"""A weighted sum of losses computed from one forward pass and one log-softmax.

``L = Σ_i weight_i · L_i``. Every Ludic loss term reads the same :class:`TokenLogpContext`, so the
``[B, T, V]`` log-softmax (and entropy) is computed once however many terms need it; third-party
losses that only implement ``compute`` share it too when they call :func:`token_context`. Stats:
``"{name}/loss"``, ``"{name}/{stat}"`` per term and the total under ``"loss"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.errors import ConfigError
from ludic_train.losses.base import Loss, SequenceLoss, Stats, TokenLogpContext, shared_token_context

__all__ = ["CompositeLoss", "LossTerm"]


@attrs.frozen
class LossTerm:
    name: str
    loss: Loss
    weight: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"LossTerm.name must be non-empty without '/', got {self.name!r}")
        if not math.isfinite(self.weight):
            raise ConfigError(f"LossTerm.weight for {self.name!r} must be finite, got {self.weight!r}")


def _terms(values: Iterable[LossTerm]) -> tuple[LossTerm, ...]:
    return tuple(values)


@attrs.frozen
class CompositeLoss(SequenceLoss):
    terms: tuple[LossTerm, ...] = attrs.field(converter=_terms)
    required_inputs: frozenset[str] = attrs.field(init=False)

    @required_inputs.default
    def _required(self) -> frozenset[str]:
        needed: frozenset[str] = frozenset()
        for term in self.terms:
            needed |= frozenset(getattr(term.loss, "required_inputs", frozenset()))
        return needed

    def __attrs_post_init__(self) -> None:
        if not self.terms:
            raise ConfigError("CompositeLoss.terms must not be empty")
        names = [t.name for t in self.terms]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"CompositeLoss term names must be unique; repeated: {duplicates}")

    def zero_weight_items_inert(self) -> bool:
        return all(isinstance(t.loss, SequenceLoss) and t.loss.zero_weight_items_inert() for t in self.terms)

    def sequence_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        foreign = [t.name for t in self.terms if not isinstance(t.loss, SequenceLoss)]
        if foreign:
            raise ConfigError(
                f"per-sequence terms need every CompositeLoss term to be a SequenceLoss; {foreign} only implement compute()"
            )
        total: Tensor | None = None
        stats: Stats = {}
        for term in self.terms:
            assert isinstance(term.loss, SequenceLoss)
            per_sequence, term_stats = term.loss.sequence_terms(ctx, batch)
            self._record(stats, term, per_sequence.mean(), term_stats)
            weighted = term.weight * per_sequence
            total = weighted if total is None else total + weighted
        assert total is not None
        return total, stats

    def compute(self, logits: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        with shared_token_context(logits, batch) as ctx:
            total = torch.zeros((), dtype=ctx.dtype, device=logits.device)
            stats: Stats = {}
            for term in self.terms:
                if isinstance(term.loss, SequenceLoss):
                    per_sequence, term_stats = term.loss.sequence_terms(ctx, batch)
                    value = per_sequence.mean()
                else:
                    value, term_stats = term.loss.compute(logits, batch)
                self._record(stats, term, value, term_stats)
                total = total + term.weight * value
        stats["loss"] = total.detach()
        return total, stats

    @staticmethod
    def _record(stats: Stats, term: LossTerm, value: Tensor, term_stats: Stats) -> None:
        stats[f"{term.name}/loss"] = value.detach()
        stats[f"{term.name}/weight"] = torch.tensor(term.weight, dtype=torch.float32, device=value.device)
        for key, stat in term_stats.items():
            if key != "loss":
                stats[f"{term.name}/{key}"] = stat
