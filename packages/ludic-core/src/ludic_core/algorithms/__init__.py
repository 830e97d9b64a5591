"""Algorithms as data, for every backend: loss specs, preprocessing, the algorithm spec and the presets.

* :mod:`~ludic_core.algorithms.losses` — what an algorithm optimises, as frozen values
  (:class:`ClippedSurrogate`, :class:`CISPO`, :class:`CrossEntropy`, :class:`TruncatedIS` …);
* :mod:`~ludic_core.algorithms.preprocess` — macro-batch steps (:class:`DropZeroWeight`,
  :class:`SubtractBaseline`);
* :mod:`~ludic_core.algorithms.spec` — :class:`AlgorithmSpec`: credit assigner + loss spec + preprocess;
* :mod:`~ludic_core.algorithms.presets` — the table of presets (:data:`PRESETS`: ``grpo``, ``sft``, ``cispo`` …).

ludic-train's ``Trainer`` and ludic-tinker's ``TinkerTrainer`` both take an :class:`AlgorithmSpec`.
"""

from ludic_core.algorithms.losses import (
    CISPO,
    GMPO,
    SAPO,
    ClippedSurrogate,
    Composite,
    CrossEntropy,
    Entropy,
    LossSpec,
    Reinforce,
    ReverseKL,
    SurrogateLevel,
    Term,
    TISLevel,
    TokenKL,
    TruncatedIS,
)
from ludic_core.algorithms.preprocess import (
    ComposedPreprocess,
    DropZeroWeight,
    Preprocess,
    SubtractBaseline,
    compose_preprocess,
)
from ludic_core.algorithms.presets import (
    PRESETS,
    Preset,
    cispo,
    dr_grpo,
    gmpo,
    grpo,
    gspo,
    mopd,
    opd,
    reinforce,
    reinforce_baseline,
    sapo,
    scalerl,
    sft,
    spo,
    with_truncated_is,
)
from ludic_core.algorithms.spec import KNOWN_INPUTS, AlgorithmSpec

__all__ = [
    "CISPO",
    "GMPO",
    "KNOWN_INPUTS",
    "PRESETS",
    "SAPO",
    "AlgorithmSpec",
    "ClippedSurrogate",
    "ComposedPreprocess",
    "Composite",
    "CrossEntropy",
    "DropZeroWeight",
    "Entropy",
    "LossSpec",
    "Preprocess",
    "Preset",
    "Reinforce",
    "ReverseKL",
    "SubtractBaseline",
    "SurrogateLevel",
    "TISLevel",
    "Term",
    "TokenKL",
    "TruncatedIS",
    "cispo",
    "compose_preprocess",
    "dr_grpo",
    "gmpo",
    "grpo",
    "gspo",
    "mopd",
    "opd",
    "reinforce",
    "reinforce_baseline",
    "sapo",
    "scalerl",
    "sft",
    "spo",
    "with_truncated_is",
]
