"""Loss specs (``ludic_core.algorithms.losses``) → the torch losses that compute them.

One builder per spec type, looked up by the spec's exact type: a spec this package cannot run fails
here, by name, rather than inside a training step. The specs carry the hyper-parameters; the builders
only move them across, so a preset's values are stated once, in ludic-core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ludic_core.algorithms import losses as specs
from ludic_core.errors import ConfigError
from ludic_train.losses.base import SequenceLoss
from ludic_train.losses.cispo import CISPOLoss
from ludic_train.losses.clipped import SequenceClippedSurrogateLoss, TokenClippedSurrogateLoss
from ludic_train.losses.composite import CompositeLoss, LossTerm
from ludic_train.losses.distill import ReverseKLLoss
from ludic_train.losses.entropy import EntropyBonus
from ludic_train.losses.gmpo import GMPOLoss
from ludic_train.losses.kl import TokenKLLoss
from ludic_train.losses.reinforce import ReinforceLoss
from ludic_train.losses.sapo import SAPOLoss
from ludic_train.losses.sft import MaskedCrossEntropyLoss
from ludic_train.losses.tis import TruncatedISCorrection

__all__ = ["build_loss"]


def _clipped(spec: specs.ClippedSurrogate) -> SequenceLoss:
    loss = TokenClippedSurrogateLoss if spec.level == "token" else SequenceClippedSurrogateLoss
    return loss(
        clip_eps_low=spec.clip_eps_low,
        clip_eps_high=spec.clip_eps_high,
        length_normalize=spec.length_normalize,
        ratio_clip=spec.ratio_clip,
    )


def _cispo(spec: specs.CISPO) -> SequenceLoss:
    return CISPOLoss(
        clip_eps_low=spec.clip_eps_low,
        clip_eps_high=spec.clip_eps_high,
        length_normalize=spec.length_normalize,
    )


def _gmpo(spec: specs.GMPO) -> SequenceLoss:
    return GMPOLoss(
        clip_eps_low=spec.clip_eps_low,
        clip_eps_high=spec.clip_eps_high,
        length_normalize=spec.length_normalize,
        ratio_clip=spec.ratio_clip,
    )


def _sapo(spec: specs.SAPO) -> SequenceLoss:
    return SAPOLoss(tau_pos=spec.tau_pos, tau_neg=spec.tau_neg, length_normalize=spec.length_normalize)


def _composite(spec: specs.Composite) -> SequenceLoss:
    return CompositeLoss([LossTerm(t.name, build_loss(t.loss), weight=t.weight) for t in spec.terms])


def _truncated_is(spec: specs.TruncatedIS) -> SequenceLoss:
    return TruncatedISCorrection(build_loss(spec.inner), level=spec.level, cap=spec.cap)


_BUILDERS: dict[type[specs.LossSpec], Callable[[Any], SequenceLoss]] = {
    specs.ClippedSurrogate: _clipped,
    specs.CISPO: _cispo,
    specs.GMPO: _gmpo,
    specs.SAPO: _sapo,
    specs.Reinforce: lambda spec: ReinforceLoss(length_normalize=spec.length_normalize),
    specs.TokenKL: lambda spec: TokenKLLoss(coeff=spec.coeff, length_normalize=spec.length_normalize),
    specs.Entropy: lambda spec: EntropyBonus(coeff=spec.coeff, length_normalize=spec.length_normalize),
    specs.CrossEntropy: lambda spec: MaskedCrossEntropyLoss(length_normalize=spec.length_normalize),
    specs.ReverseKL: lambda spec: ReverseKLLoss(coeff=spec.coeff, length_normalize=spec.length_normalize),
    specs.Composite: _composite,
    specs.TruncatedIS: _truncated_is,
}


def build_loss(spec: specs.LossSpec) -> SequenceLoss:
    """The torch loss that computes ``spec``; :class:`ConfigError` naming the spec type if there is none."""
    builder = _BUILDERS.get(type(spec))
    if builder is None:
        known = sorted(t.__name__ for t in _BUILDERS)
        raise ConfigError(
            f"ludic-train has no torch loss for the loss spec {type(spec).__name__} ({spec!r}); "
            f"it builds {known}. Pass a torch loss to RLAlgorithm(loss=...) directly instead"
        )
    return builder(spec)
