"""An RL algorithm is a credit assigner plus a loss (plus an optional macro-batch preprocess).

New algorithms are new pairs, never new trainer classes: the trainer only calls :meth:`prepare` on
each macro-batch and :meth:`compute_loss` on each micro-batch. The credit assigner is used upstream,
where rollouts become SAW items (``ludic_core.saw_builder``); the algorithm carries it so one object
describes the whole method.

An algorithm is usually built from a torch-free :class:`~ludic_core.algorithms.spec.AlgorithmSpec`
(:meth:`RLAlgorithm.from_spec`; the presets in ``ludic_core.algorithms`` are such specs), which it keeps
as ``spec`` so that other backends can run the same method.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms.preprocess import Preprocess
from ludic_core.algorithms.spec import KNOWN_INPUTS, AlgorithmSpec
from ludic_core.credit import CreditAssigner
from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWBatch
from ludic_train.losses.base import HOW_TO_PROVIDE, Loss, Stats
from ludic_train.losses.build import build_loss
from ludic_train.model_signature import accepts_logits_to_keep
from ludic_train.policy_forward import policy_logits

__all__ = ["KNOWN_INPUTS", "RLAlgorithm", "accepts_logits_to_keep"]


def _input_names(values: Iterable[str]) -> frozenset[str]:
    if isinstance(values, str):
        raise ConfigError(f"required_inputs must be a collection of field names, got the string {values!r}")
    return frozenset(values)


def _default_required(self: RLAlgorithm) -> frozenset[str]:
    return frozenset(getattr(self.loss, "required_inputs", frozenset()))


def _losses_needing(loss: object, field: str) -> list[str]:
    """The losses inside ``loss`` that declare ``field`` in their ``required_inputs``, by name: a
    composite's terms as ``term: Loss``, a wrapper as ``Wrapper(Inner)``."""
    terms = getattr(loss, "terms", None)
    if terms is not None:
        return [f"{term.name}: {name}" for term in terms for name in _losses_needing(term.loss, field)]
    if field not in getattr(loss, "required_inputs", frozenset()):
        return []
    inner = getattr(loss, "loss", None)
    name = type(loss).__name__
    return [f"{name}({type(inner).__name__})" if inner is not None else name]


@attrs.frozen
class RLAlgorithm:
    """``required_inputs`` defaults to what the loss declares; :meth:`validate` checks items carry them.

    ``spec`` is the :class:`~ludic_core.algorithms.spec.AlgorithmSpec` the algorithm was built from
    (:meth:`from_spec`), kept only while it still describes the algorithm: an ``attrs.evolve`` that
    changes the name, credit assigner, loss, preprocess or required inputs drops it (to None), so a
    backend handed this algorithm never runs a stale spec.
    """

    name: str
    credit_assigner: CreditAssigner
    loss: Loss
    preprocess: Preprocess | None = None
    required_inputs: frozenset[str] = attrs.field(
        default=attrs.Factory(_default_required, takes_self=True), converter=_input_names
    )
    spec: AlgorithmSpec | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise ConfigError("RLAlgorithm.name must not be empty")
        unknown = sorted(self.required_inputs - KNOWN_INPUTS.keys())
        if unknown:
            raise ConfigError(
                f"RLAlgorithm {self.name!r}: unknown required_inputs {unknown}; known: {sorted(KNOWN_INPUTS)}"
            )
        if self.spec is not None and not self._described_by(self.spec):
            # attrs' documented way to set a field of a frozen instance during initialisation.
            object.__setattr__(self, "spec", None)

    @classmethod
    def from_spec(cls, spec: AlgorithmSpec) -> RLAlgorithm:
        """The torch algorithm for ``spec``: its loss built by :func:`~ludic_train.losses.build_loss`."""
        if not isinstance(spec, AlgorithmSpec):
            raise ConfigError(f"RLAlgorithm.from_spec takes an AlgorithmSpec, got {type(spec).__name__}")
        return cls(
            name=spec.name,
            credit_assigner=spec.credit_assigner,
            loss=build_loss(spec.loss),
            preprocess=spec.preprocess,
            required_inputs=spec.required_inputs,
            spec=spec,
        )

    def _described_by(self, spec: AlgorithmSpec) -> bool:
        return (
            spec.name == self.name
            and spec.credit_assigner == self.credit_assigner
            and spec.preprocess == self.preprocess
            and spec.required_inputs == self.required_inputs
            and build_loss(spec.loss) == self.loss
        )

    def validate(self, batch: SAWBatch) -> None:
        """Raise :class:`DataError` naming every required field that items lack, which items, the loss
        that needs it and how to provide it.

        The trainer calls this (through :meth:`prepare`) on every batch before collating it, so data
        sampled without what the loss needs (e.g. rollouts run without chosen-token logprobs) fails on
        the first batch with the fix, not inside collate or the loss.
        """
        problems = []
        for field in sorted(self.required_inputs):
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
        if self.preprocess is not None:
            batch = self.preprocess(batch)
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
