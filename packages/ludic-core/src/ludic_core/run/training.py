"""The settings every backend's recipe reads under the same names (the ``[trainer]``, ``[lora]`` and
``[run]`` tables): a backend extends a class with what only it honours, and gives its own defaults as
values (Tinker's learning rate). Intervals and clipping: 0 disables (TOML has no null)."""

from __future__ import annotations

from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.validation import check_number, int_at_least, non_negative_number, positive_number

__all__ = ["DEFAULT_ADAM_EPS", "LoraSettings", "RunSettings", "TrainerSettings"]

DEFAULT_ADAM_EPS = 1e-8
"""Adam's epsilon on every backend (Tinker's SDK would otherwise send its own, 1e-12)."""


def _betas(instance: Any, _attribute: Any, value: object) -> None:
    owner = type(instance).__name__
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ConfigError(f"{owner}.betas must be two numbers in [0, 1), got {value!r}")
    for index, beta in enumerate(value):
        check_number(f"{owner}.betas[{index}]", beta, minimum=0.0)
        if beta >= 1:
            raise ConfigError(f"{owner}.betas must be two numbers in [0, 1), got {value!r}")


@attrs.frozen(kw_only=True)
class TrainerSettings:
    """AdamW with ``lr``, ``weight_decay``, ``betas``, ``eps``; ``max_grad_norm``: clip the global
    gradient norm (0: no clipping); ``eval_every_steps``: evaluate every N steps (0: never)."""

    lr: float = attrs.field(default=1e-5, validator=positive_number())
    weight_decay: float = attrs.field(default=0.01, validator=non_negative_number())
    betas: tuple[float, float] = attrs.field(default=(0.9, 0.999), validator=_betas)
    eps: float = attrs.field(default=DEFAULT_ADAM_EPS, validator=positive_number())
    max_grad_norm: float = attrs.field(default=1.0, validator=non_negative_number())
    eval_every_steps: int = attrs.field(default=0, validator=int_at_least(0))


@attrs.frozen(kw_only=True)
class LoraSettings:
    """LoRA adapters of rank ``rank`` on the model (0: full fine-tuning, where the backend can)."""

    rank: int = attrs.field(default=8, validator=int_at_least(0))


@attrs.frozen(kw_only=True)
class RunSettings:
    """Every ``checkpoint_every`` steps a checkpoint goes to ``<run_dir>/checkpoints``, which
    ``ludic train --resume`` continues from (0: no checkpoints)."""

    checkpoint_every: int = attrs.field(default=10, validator=int_at_least(0))
