"""The algorithm presets as torch algorithms: each ``make_<name>`` is ``RLAlgorithm.from_spec`` over the
torch-free preset :func:`ludic_core.algorithms.presets.<name>`, with the same keyword arguments.

The presets themselves (credit assigner, loss spec, preprocess and every default) are data in
:mod:`ludic_core.algorithms.presets`; this module states none of them. The docs' algorithms page
(docs/concepts/algorithms.md, "Presets") lists every preset with its defaults in one table. The trainer also takes the
spec directly (``Trainer(algorithm=ludic_core.algorithms.grpo(), ...)``), and by name:
``ludic_core.make_algorithm("grpo")``.

:func:`with_truncated_is` adds the truncated importance-sampling correction for the sampler/trainer
mismatch to any algorithm.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec

import attrs

from ludic_core.algorithms import presets
from ludic_core.algorithms.losses import TISLevel
from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.errors import ConfigError
from ludic_train.algorithm import RLAlgorithm
from ludic_train.losses.base import SequenceLoss
from ludic_train.losses.tis import TruncatedISCorrection

__all__ = [
    "make_cispo",
    "make_dr_grpo",
    "make_gmpo",
    "make_grpo",
    "make_gspo",
    "make_mopd",
    "make_opd",
    "make_reinforce",
    "make_reinforce_baseline",
    "make_sapo",
    "make_scalerl",
    "make_sft",
    "make_spo",
    "with_truncated_is",
]

P = ParamSpec("P")


def _torch_preset(preset: Callable[P, AlgorithmSpec]) -> Callable[P, RLAlgorithm]:
    @functools.wraps(preset)
    def make(*args: P.args, **kwargs: P.kwargs) -> RLAlgorithm:
        return RLAlgorithm.from_spec(preset(*args, **kwargs))

    make.__name__ = make.__qualname__ = f"make_{preset.__name__}"
    make.__module__ = __name__
    make.__doc__ = (
        f"``RLAlgorithm.from_spec(ludic_core.algorithms.presets.{preset.__name__}(**kwargs))``.\n\n"
        f"{preset.__doc__ or ''}"
    )
    return make


make_reinforce = _torch_preset(presets.reinforce)
make_reinforce_baseline = _torch_preset(presets.reinforce_baseline)
make_grpo = _torch_preset(presets.grpo)
make_dr_grpo = _torch_preset(presets.dr_grpo)
make_gspo = _torch_preset(presets.gspo)
make_gmpo = _torch_preset(presets.gmpo)
make_cispo = _torch_preset(presets.cispo)
make_sapo = _torch_preset(presets.sapo)
make_scalerl = _torch_preset(presets.scalerl)
make_spo = _torch_preset(presets.spo)
make_sft = _torch_preset(presets.sft)
make_opd = _torch_preset(presets.opd)
make_mopd = _torch_preset(presets.mopd)


def with_truncated_is(
    algorithm: RLAlgorithm, *, level: TISLevel = "token", cap: float | None = 2.0
) -> RLAlgorithm:
    """The same algorithm with its loss wrapped in :class:`TruncatedISCorrection` (needs ``actor_logps``).

    An algorithm built from a spec gets :func:`ludic_core.algorithms.presets.with_truncated_is` on its
    spec, so it stays a spec other backends can read; a hand-built one has its torch loss wrapped.
    Token level needs a token-decomposable loss (all but GSPO, GMPO and composites); sequence level
    works with every Ludic loss."""
    if algorithm.spec is not None:
        return RLAlgorithm.from_spec(presets.with_truncated_is(algorithm.spec, level=level, cap=cap))
    if not isinstance(algorithm.loss, SequenceLoss):
        raise ConfigError(
            f"with_truncated_is: algorithm {algorithm.name!r} has a {type(algorithm.loss).__name__} loss; "
            "TIS wraps Ludic SequenceLoss subclasses"
        )
    loss = TruncatedISCorrection(algorithm.loss, level=level, cap=cap)
    return attrs.evolve(
        algorithm, loss=loss, required_inputs=algorithm.required_inputs | loss.required_inputs
    )
