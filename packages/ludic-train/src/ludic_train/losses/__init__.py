"""Losses on collated micro-batches (causal shift, action-token masks, one term per sequence).

One module per family; :mod:`ludic_train.losses.base` holds the :class:`Loss` protocol, the shared
token-logprob context and :func:`stats_to_host`; :func:`build_loss` turns a ludic-core loss spec into
the loss that computes it.
"""

from ludic_train.losses.base import (
    Loss,
    SequenceLoss,
    Stats,
    TokenLogpContext,
    TokenLoss,
    shared_token_context,
    stats_to_host,
    token_context,
)
from ludic_train.losses.build import build_loss
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

__all__ = [
    "CISPOLoss",
    "CompositeLoss",
    "EntropyBonus",
    "GMPOLoss",
    "Loss",
    "MaskedCrossEntropyLoss",
    "ReinforceLoss",
    "ReverseKLLoss",
    "SAPOLoss",
    "SequenceClippedSurrogateLoss",
    "SequenceLoss",
    "Stats",
    "TokenClippedSurrogateLoss",
    "TokenKLLoss",
    "TokenLogpContext",
    "TokenLoss",
    "TruncatedISCorrection",
    "build_loss",
    "shared_token_context",
    "stats_to_host",
    "token_context",
]
