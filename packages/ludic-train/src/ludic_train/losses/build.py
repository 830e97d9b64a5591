"""Loss specs (``ludic_core.algorithms.losses``) → the torch losses that compute them.

Each torch loss subclasses the spec it computes, so building one only moves the spec's field values
across: the values live in the spec, the defaults in the spec class. A loss spec with a ``compute`` method
(every ``SequenceLoss``) is a torch loss already. A spec this package cannot run fails here, by name, rather than inside a training step.
"""

from __future__ import annotations

from typing import Any, cast

import attrs

from ludic_core.algorithms import losses as specs
from ludic_core.errors import ConfigError
from ludic_train.losses.base import Loss, SequenceLoss
from ludic_train.losses.cispo import CISPOLoss
from ludic_train.losses.clipped import SequenceClippedSurrogateLoss, TokenClippedSurrogateLoss
from ludic_train.losses.composite import CompositeLoss
from ludic_train.losses.distill import ReverseKLLoss
from ludic_train.losses.entropy import EntropyBonus
from ludic_train.losses.gmpo import GMPOLoss
from ludic_train.losses.kl import TokenKLLoss
from ludic_train.losses.reinforce import ReinforceLoss
from ludic_train.losses.sapo import SAPOLoss
from ludic_train.losses.sft import MaskedCrossEntropyLoss
from ludic_train.losses.tis import TruncatedISCorrection

__all__ = ["build_loss"]

_TORCH: dict[type[specs.LossSpec], type[SequenceLoss]] = {
    specs.CISPO: CISPOLoss,
    specs.GMPO: GMPOLoss,
    specs.SAPO: SAPOLoss,
    specs.Reinforce: ReinforceLoss,
    specs.TokenKL: TokenKLLoss,
    specs.Entropy: EntropyBonus,
    specs.CrossEntropy: MaskedCrossEntropyLoss,
    specs.ReverseKL: ReverseKLLoss,
}


def _as_spec(loss: Loss) -> specs.LossSpec:
    # build_loss returns either its argument (a spec that computes itself) or a SequenceLoss: a spec.
    return cast(specs.LossSpec, loss)


def build_loss(spec: specs.LossSpec) -> Loss:
    """The torch loss that computes ``spec``; :class:`ConfigError` naming the spec type if there is none."""
    if isinstance(spec, Loss):  # a loss spec that computes itself: a torch loss already
        return spec
    if isinstance(spec, specs.Composite):
        return CompositeLoss([attrs.evolve(t, loss=_as_spec(build_loss(t.loss))) for t in spec.terms])
    if isinstance(spec, specs.TruncatedIS):
        return TruncatedISCorrection(_as_spec(build_loss(spec.inner)), level=spec.level, cap=spec.cap)
    if isinstance(spec, specs.ClippedSurrogate):
        torch_loss: type[SequenceLoss] = (
            TokenClippedSurrogateLoss if spec.level == "token" else SequenceClippedSurrogateLoss
        )
    elif type(spec) in _TORCH:
        torch_loss = _TORCH[type(spec)]
    else:
        known = sorted(
            t.__name__ for t in (*_TORCH, specs.ClippedSurrogate, specs.Composite, specs.TruncatedIS)
        )
        raise ConfigError(
            f"ludic-train has no torch loss for the loss spec {type(spec).__name__} ({spec!r}); "
            f"it builds {known}. A torch loss that subclasses the loss spec (as ludic_train.losses.SequenceLoss "
            "does) is one: pass it as the AlgorithmSpec's loss"
        )
    fields = attrs.fields(cast(Any, torch_loss))
    values = {f.name: getattr(spec, f.name) for f in fields if f.init}
    return torch_loss(**values)
