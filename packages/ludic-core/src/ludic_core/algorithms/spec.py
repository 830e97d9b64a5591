"""An algorithm as data: a credit assigner, a loss spec and an optional macro-batch preprocess.

The credit assigner runs upstream, where rollouts become SAW items (``ludic_core.saw_builder``); the
preprocess runs on each macro-batch before the loss; the loss spec says what the backend optimises.
Nothing here needs torch, so one spec drives every backend: ludic-train's ``Trainer`` builds its torch
losses from it and ludic-tinker's ``TinkerTrainer`` the Tinker loss that computes the same objective.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ludic_core.algorithms.losses import LossSpec
from ludic_core.algorithms.preprocess import Preprocess
from ludic_core.credit import CreditAssigner
from ludic_core.errors import ConfigError

__all__ = ["KNOWN_INPUTS", "AlgorithmSpec"]

KNOWN_INPUTS: Mapping[str, str] = {
    "actor_logps": "behaviour-policy logprobs of every action token from the sampler",
    "teacher_logps": "teacher logprobs of every action token",
}
"""Optional SAW item fields an algorithm can require, with what they are."""


def _input_names(values: Iterable[str]) -> frozenset[str]:
    if isinstance(values, str):
        raise ConfigError(f"required_inputs must be a collection of field names, got the string {values!r}")
    return frozenset(values)


def _loss_spec(instance: AlgorithmSpec, _attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, LossSpec):
        raise ConfigError(
            f"AlgorithmSpec {instance.name!r}: loss must be a LossSpec from ludic_core.algorithms, "
            f"got {type(value).__name__}"
        )


def _loss_inputs(self: AlgorithmSpec) -> frozenset[str]:
    # Defaults are computed before validators run: a wrong loss is reported by _loss_spec, not here.
    return self.loss.required_inputs if isinstance(self.loss, LossSpec) else frozenset()


@attrs.frozen
class AlgorithmSpec:
    """One RL (or supervised) method, for any backend.

    ``required_inputs`` defaults to what the loss reads; pass more to make batches carry a field the
    loss itself does not need.
    """

    name: str
    credit_assigner: CreditAssigner
    loss: LossSpec = attrs.field(validator=_loss_spec)
    preprocess: Preprocess | None = None
    required_inputs: frozenset[str] = attrs.field(
        default=attrs.Factory(_loss_inputs, takes_self=True), converter=_input_names
    )

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"AlgorithmSpec.name must be a non-empty str, got {self.name!r}")
        if self.preprocess is not None and not callable(self.preprocess):
            raise ConfigError(
                f"AlgorithmSpec {self.name!r}: preprocess must be callable (SAWBatch -> SAWBatch) or None, "
                f"got {self.preprocess!r}"
            )
        unknown = sorted(self.required_inputs - KNOWN_INPUTS.keys())
        if unknown:
            raise ConfigError(
                f"AlgorithmSpec {self.name!r}: unknown required_inputs {unknown}; known: {sorted(KNOWN_INPUTS)}"
            )
        missing = sorted(self.loss.required_inputs - self.required_inputs)
        if missing:
            raise ConfigError(
                f"AlgorithmSpec {self.name!r}: required_inputs {sorted(self.required_inputs)} leave out "
                f"{missing}, which the loss {type(self.loss).__name__} reads"
            )
