"""A weighted sum of losses computed from one forward pass and one log-softmax.

``L = Σ_i weight_i · L_i``. Every Ludic loss term reads the same :class:`TokenLogpContext`, so the
``[B, T, V]`` log-softmax (and entropy) is computed once however many terms need it; third-party
losses that only implement ``compute`` share it too when they call :func:`token_context`. Stats:
``"{name}/loss"``, ``"{name}/{stat}"`` per term and the total under ``"loss"``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms import losses as specs
from ludic_core.algorithms.losses import Term
from ludic_core.errors import ConfigError
from ludic_train.losses.base import Loss, SequenceLoss, Stats, TokenLogpContext, shared_token_context

__all__ = ["CompositeLoss"]


@attrs.frozen
class CompositeLoss(SequenceLoss, specs.Composite):
    """Computes :class:`ludic_core.algorithms.Composite`: its ``Term`` values hold torch losses."""

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
                    assert isinstance(term.loss, Loss), f"term {term.name!r} has no compute()"
                    value, term_stats = term.loss.compute(logits, batch)
                self._record(stats, term, value, term_stats)
                total = total + term.weight * value
        stats["loss"] = total.detach()
        return total, stats

    @staticmethod
    def _record(stats: Stats, term: Term, value: Tensor, term_stats: Stats) -> None:
        stats[f"{term.name}/loss"] = value.detach()
        stats[f"{term.name}/weight"] = torch.tensor(term.weight, dtype=torch.float32, device=value.device)
        for key, stat in term_stats.items():
            if key != "loss":
                stats[f"{term.name}/{key}"] = stat
