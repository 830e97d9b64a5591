"""How the torch trainer runs an :class:`~ludic_core.algorithms.spec.AlgorithmSpec` (the one algorithm
type, for every backend): its loss built by :func:`~ludic_train.losses.build_loss`, the preprocess, the
check that items carry what the loss reads, and one forward pass per micro-batch.

The trainer only calls :meth:`TorchAlgorithm.prepare` on each macro-batch and
:meth:`TorchAlgorithm.compute_loss` on each micro-batch; new algorithms are new specs, never new
trainer classes. A custom torch loss (a :class:`~ludic_train.losses.SequenceLoss`) is a loss spec, so
``AlgorithmSpec(name, credit_assigner, MyLoss())`` runs here as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms.spec import KNOWN_INPUTS, AlgorithmSpec
from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWBatch
from ludic_train.losses.base import HOW_TO_PROVIDE, Loss, Stats
from ludic_train.losses.build import build_loss
from ludic_train.model_signature import accepts_logits_to_keep
from ludic_train.policy_forward import policy_logits

__all__ = ["TorchAlgorithm", "accepts_logits_to_keep"]


def _losses_needing(loss: object, field: str) -> list[str]:
    """The losses inside ``loss`` that declare ``field`` in their ``required_inputs``, by name: a
    composite's terms as ``term: Loss``, a wrapper as ``Wrapper(Inner)``."""
    terms = getattr(loss, "terms", None)
    if terms is not None:
        return [f"{term.name}: {name}" for term in terms for name in _losses_needing(term.loss, field)]
    if field not in getattr(loss, "required_inputs", frozenset()):
        return []
    inner = getattr(loss, "inner", None)
    name = type(loss).__name__
    return [f"{name}({type(inner).__name__})" if inner is not None else name]


@attrs.frozen
class TorchAlgorithm:
    """``spec`` with its torch loss (:meth:`from_spec`)."""

    spec: AlgorithmSpec
    loss: Loss

    @classmethod
    def from_spec(cls, spec: AlgorithmSpec) -> TorchAlgorithm:
        if not isinstance(spec, AlgorithmSpec):
            raise ConfigError(
                f"the algorithm must be an AlgorithmSpec (ludic_core.algorithms, e.g. grpo()), got {type(spec).__name__}"
            )
        return cls(spec, build_loss(spec.loss))

    @property
    def name(self) -> str:
        return self.spec.name

    def validate(self, batch: SAWBatch) -> None:
        """Raise :class:`DataError` naming every required field that items lack, which items, the loss
        that needs it and how to provide it.

        The trainer calls this (through :meth:`prepare`) on every batch before collating it, so data
        sampled without what the loss needs (e.g. rollouts run without chosen-token logprobs) fails on
        the first batch with the fix, not inside collate or the loss.
        """
        problems = []
        for field in sorted(self.spec.required_inputs):
            missing = [i for i, item in enumerate(batch.items) if getattr(item, field) is None]
            if missing:
                shown = missing if len(missing) <= 20 else [*missing[:20], "..."]
                needers = _losses_needing(self.loss, field)
                who = (
                    f"the loss {', '.join(needers)} needs it"
                    if needers
                    else f"the algorithm's required_inputs list it (loss {type(self.loss).__name__})"
                )
                problems.append(
                    f"{field} is missing on {len(missing)} of {len(batch.items)} items: {shown}; {who} "
                    f"({KNOWN_INPUTS[field]}); to provide it, {HOW_TO_PROVIDE[field]}"
                )
        if problems:
            raise DataError(f"algorithm {self.name!r} cannot train on this batch: " + "; ".join(problems))

    def prepare(self, batch: SAWBatch) -> SAWBatch:
        """The macro-batch after preprocessing, validated. Call once per step, before micro-batching."""
        if self.spec.preprocess is not None:
            batch = self.spec.preprocess(batch)
        self.validate(batch)
        return batch

    def compute_loss(
        self,
        model: torch.nn.Module,
        batch: Mapping[str, Tensor],
        *,
        cast_logits_to_fp32: bool = False,
        share_prefix: bool = True,
    ) -> tuple[Tensor, Stats]:
        """One forward pass on a collated micro-batch (:func:`~ludic_train.policy_forward.policy_logits`:
        logits only where the loss reads them, a prefix common to every row run once when
        ``share_prefix``), then the loss (a mean over its sequences)."""
        logits = policy_logits(model, batch, share_prefix=share_prefix)
        if cast_logits_to_fp32:
            logits = logits.float()
        return self.loss.compute(logits, batch)
