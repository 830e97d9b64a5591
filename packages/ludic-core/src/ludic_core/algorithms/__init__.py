"""Algorithms as data, for every backend: loss specs, preprocessing, the algorithm spec and the presets.

* :mod:`~ludic_core.algorithms.losses` — what an algorithm optimises, as frozen values
  (:class:`ClippedSurrogate`, :class:`CISPO`, :class:`CrossEntropy`, :class:`TruncatedIS` …);
* :mod:`~ludic_core.algorithms.preprocess` — macro-batch steps (:class:`DropZeroWeight`,
  :class:`SubtractBaseline`);
* :mod:`~ludic_core.algorithms.spec` — :class:`AlgorithmSpec`: credit assigner + loss spec + preprocess;
* :mod:`~ludic_core.algorithms.presets` — the table of presets (:data:`PRESETS`: ``grpo``, ``sft``, ``cispo`` …).

ludic-train's ``Trainer`` and ludic-tinker's ``TinkerTrainer`` both take an :class:`AlgorithmSpec`.
"""

from ludic_core.algorithms import losses, preprocess, presets, spec
from ludic_core.algorithms.losses import *  # noqa: F403
from ludic_core.algorithms.preprocess import *  # noqa: F403
from ludic_core.algorithms.presets import *  # noqa: F403
from ludic_core.algorithms.spec import *  # noqa: F403

# Each module's ``__all__`` is its list of public names; this package exports them all.
__all__: list[str] = []
__all__ += losses.__all__
__all__ += preprocess.__all__
__all__ += presets.__all__
__all__ += spec.__all__
