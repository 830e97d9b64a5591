"""The ``tinker`` sampler (entry-point group ``ludic.samplers``): an RL recipe with ``backend.kind=tinker``
samples and trains on the Tinker service (:func:`~ludic_tinker.recipe_run.run_tinker_rl`). Its run
config is the shared RL table, the settings every backend names alike (``[trainer]``: ``lr``, ``betas``,
``eps``, ``weight_decay``, ``max_grad_norm``, ``eval_every_steps``; ``[lora]``: ``rank``; ``[run]``:
``checkpoint_every``; :mod:`ludic_core.run.training`) with Tinker's Adam defaults, plus ``[tinker]``
(where and what Tinker trains; ``[tinker.timeouts]`` :class:`~ludic_tinker.TinkerTimeouts`):

    ludic train tictactoe-grpo backend.kind=tinker tinker.fake_service=true --dry-run   # offline, no key
    ludic train gsm8k-grpo backend.kind=tinker algorithm=gspo             # GSPO (SDK 0.34 or newer)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import attrs

from ludic_core.run.rl import RLEpisodesConfig
from ludic_core.run.samplers import SamplerKind
from ludic_core.run.training import LoraSettings, RunSettings, TrainerSettings
from ludic_tinker.session import TinkerTimeouts
from ludic_tinker.trainer import AdamConfig

__all__ = ["TinkerRLRunConfig", "TinkerSettings", "adam_config", "tinker_sampler"]


@attrs.frozen(kw_only=True)
class TinkerSettings:
    """``base_model`` trained on the service at ``base_url`` (None: ``TINKER_BASE_URL`` or production;
    the key from ``TINKER_API_KEY``). ``tokenizer``: a tokenizer directory or hub name (None: the base
    model's; for ``fake/tiny-char-lm``, the model of ``ludic_tinker.testing``'s fake service, its byte
    tokenizer). ``fake_service``: run against ludic-tinker's loopback fake (offline, no key; a tiny
    byte-level model stands in for ``base_model``)."""

    base_model: str = "Qwen/Qwen3-4B-Instruct-2507"
    base_url: str | None = None
    tokenizer: str | None = None
    fake_service: bool = False
    timeouts: TinkerTimeouts = attrs.field(factory=TinkerTimeouts)


_ADAM_KEYS = {
    "learning_rate": "lr",
    "eps": "eps",
    "weight_decay": "weight_decay",
    "grad_clip_norm": "max_grad_norm",
}
""":class:`~ludic_tinker.AdamConfig`'s fields and their ``[trainer]`` keys (``beta1``, ``beta2``:
``betas``); both disable clipping with 0."""


def _tinker_adam_defaults() -> TrainerSettings:
    """Tinker's Adam defaults (``AdamConfig``'s) as the ``[trainer]`` table."""
    adam = AdamConfig()
    shared = {key: getattr(adam, field) for field, key in _ADAM_KEYS.items()}
    return TrainerSettings(betas=(adam.beta1, adam.beta2), **shared)


def adam_config(trainer: TrainerSettings) -> AdamConfig:
    """The ``[trainer]`` table as the Adam step Tinker runs."""
    beta1, beta2 = trainer.betas
    return AdamConfig(beta1=beta1, beta2=beta2, **{f: getattr(trainer, k) for f, k in _ADAM_KEYS.items()})


@attrs.frozen(kw_only=True)
class TinkerRLRunConfig(RLEpisodesConfig):
    """On-policy RL on the Tinker service: sampling and training remote, no local model. Every
    ``run.checkpoint_every`` steps weights and Adam state are saved on the service, with a local record
    in ``<run_dir>/checkpoints`` that ``--resume`` continues from; every ``trainer.eval_every_steps``
    steps the evaluation runs (both 0: never)."""

    RENAMED_KEYS: ClassVar[Mapping[str, str]] = {
        **{f"tinker.adam.{field}": f"trainer.{key}" for field, key in _ADAM_KEYS.items()},
        "tinker.adam.beta1": "trainer.betas",
        "tinker.adam.beta2": "trainer.betas",
        "tinker.lora_rank": "lora.rank",
        "tinker.checkpoint_every": "run.checkpoint_every",
        "tinker.eval_every": "trainer.eval_every_steps",
    }
    """The ``[tinker]`` keys that every backend names alike, refused with the shared name."""

    trainer: TrainerSettings = attrs.field(factory=_tinker_adam_defaults)
    lora: LoraSettings = attrs.field(factory=lambda: LoraSettings(rank=32))
    run: RunSettings = attrs.field(factory=lambda: RunSettings(checkpoint_every=0))
    tinker: TinkerSettings = attrs.field(factory=TinkerSettings)


def tinker_sampler() -> SamplerKind:
    return SamplerKind(
        summary="the Tinker service samples and trains (no local GPU; tinker.fake_service for a dry run)",
        config_class=TinkerRLRunConfig,
        runner="ludic_tinker.recipe_run:run_tinker_rl",
        checks=("ludic_tinker.recipe_run:check_tinker_rl",),
    )
