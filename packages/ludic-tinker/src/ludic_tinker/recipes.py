"""The Tinker recipes of ``ludic train``: ``tictactoe-grpo-tinker`` and ``gsm8k-grpo-tinker``
(entry-point group ``ludic.recipes``). Both run :func:`~ludic_tinker.recipe_run.run_tinker_rl`; they
differ only in their defaults (the env's, shared with the local recipes, and the sampling budget).

The RL table is ludic-core's :class:`~ludic_core.cli.rl_recipe.RLEpisodesConfig`, the same as the
local recipe's (env, sampling, prompts x group per step, steps, algorithm, evaluation), so a run
switches backend by switching recipe; the ``[tinker]`` table says where and what Tinker trains:

    ludic train tictactoe-grpo-tinker tinker.base_model=Qwen/Qwen3-4B-Instruct-2507 steps=20
    ludic train tictactoe-grpo-tinker tinker.fake_service=true --dry-run   # offline, no key
    ludic train gsm8k-grpo-tinker algorithm=gspo                           # GSPO (SDK 0.34 or newer)

``[tinker.adam]`` is :class:`~ludic_tinker.AdamConfig` and ``[tinker.timeouts]``
:class:`~ludic_tinker.TinkerTimeouts`, as the library takes them.
"""

from __future__ import annotations

from typing import Any

import attrs

from ludic_core.cli.recipes import Recipe
from ludic_core.cli.rl_recipe import GSM8K_RL_DEFAULTS, TICTACTOE_RL_DEFAULTS, RLEpisodesConfig
from ludic_core.errors import ConfigError
from ludic_tinker.connect import TinkerTimeouts
from ludic_tinker.trainer import AdamConfig

__all__ = ["TinkerRLRunConfig", "TinkerSettings", "gsm8k_grpo_tinker", "tictactoe_grpo_tinker"]


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


def _tinker_recipe(summary: str, defaults: dict[str, Any]) -> Recipe:
    return Recipe(
        summary=summary,
        config_class=TinkerRLRunConfig,
        runner="ludic_tinker.recipe_run:run_tinker_rl",
        check="ludic_tinker.recipe_run:check_tinker_rl",
        defaults={**defaults, "backend": {"kind": "tinker"}},
    )


def tictactoe_grpo_tinker() -> Recipe:
    return _tinker_recipe(
        "GRPO + LoRA on Tic-Tac-Toe on the Tinker service (no local GPU; tinker.fake_service for a dry run)",
        {**TICTACTOE_RL_DEFAULTS, "tinker": {"eval_every": 10}},
    )


def gsm8k_grpo_tinker() -> Recipe:
    return _tinker_recipe(
        "GRPO + LoRA on GSM8K on the Tinker service (algorithm=gspo for GSPO; tinker.fake_service for a dry run)",
        {
            **GSM8K_RL_DEFAULTS,
            "sampling": {"max_tokens": 512},
            "eval_episodes": 200,
            "tinker": {"eval_every": 10},
        },
    )
