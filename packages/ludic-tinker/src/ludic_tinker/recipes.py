"""The ``tinker`` sampler (entry-point group ``ludic.samplers``): an RL recipe with ``backend.kind=tinker``
samples and trains on the Tinker service (:func:`~ludic_tinker.recipe_run.run_tinker_rl`). Its run
config is the shared RL table plus ``[tinker]`` (where and what Tinker trains; ``[tinker.adam]`` is
:class:`~ludic_tinker.AdamConfig`, ``[tinker.timeouts]`` :class:`~ludic_tinker.TinkerTimeouts`):

    ludic train tictactoe-grpo backend.kind=tinker tinker.fake_service=true --dry-run   # offline, no key
    ludic train gsm8k-grpo backend.kind=tinker algorithm=gspo             # GSPO (SDK 0.34 or newer)"""

from __future__ import annotations

import attrs

from ludic_core.errors import ConfigError
from ludic_core.run.rl import RLEpisodesConfig
from ludic_core.run.samplers import SamplerKind
from ludic_tinker.session import TinkerTimeouts
from ludic_tinker.trainer import AdamConfig

__all__ = ["TinkerRLRunConfig", "TinkerSettings", "tinker_sampler"]


def _optional_positive(instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and value < 1:
        raise ConfigError(f"{type(instance).__name__}.{attribute.name} must be >= 1 or unset, got {value!r}")


@attrs.frozen(kw_only=True)
class TinkerSettings:
    """``base_model`` trained with LoRA ``lora_rank`` on the service at ``base_url`` (None:
    ``TINKER_BASE_URL`` or production; the key from ``TINKER_API_KEY``). ``tokenizer``: a tokenizer
    directory or hub name (None: the base model's; for ``fake/tiny-char-lm``, the model of
    ``ludic_tinker.testing``'s fake service, its byte tokenizer). ``fake_service``: run against ludic-tinker's loopback
    fake (offline, no key; a tiny byte-level model stands in for ``base_model``). Every
    ``checkpoint_every`` steps weights and Adam state are saved on the service, with a local record in
    ``<run_dir>/checkpoints`` that ``--resume`` continues from; every ``eval_every`` steps the
    evaluation runs (both None: never)."""

    base_model: str = "Qwen/Qwen3-4B-Instruct-2507"
    lora_rank: int = 32
    base_url: str | None = None
    tokenizer: str | None = None
    fake_service: bool = False
    checkpoint_every: int | None = attrs.field(default=None, validator=_optional_positive)
    eval_every: int | None = attrs.field(default=None, validator=_optional_positive)
    adam: AdamConfig = attrs.field(factory=AdamConfig)
    timeouts: TinkerTimeouts = attrs.field(factory=TinkerTimeouts)


@attrs.frozen(kw_only=True)
class TinkerRLRunConfig(RLEpisodesConfig):
    """On-policy RL on the Tinker service: sampling and training remote, no local model."""

    tinker: TinkerSettings = attrs.field(factory=TinkerSettings)


def tinker_sampler() -> SamplerKind:
    return SamplerKind(
        summary="the Tinker service samples and trains (no local GPU; tinker.fake_service for a dry run)",
        config_class=TinkerRLRunConfig,
        runner="ludic_tinker.recipe_run:run_tinker_rl",
        checks=("ludic_tinker.recipe_run:check_tinker_rl",),
    )
