"""The typed run configs of the ``ludic train`` recipes (attrs classes; torch-free, so a config is
validated before anything heavy is imported).

Each setting has one owner, reused rather than re-declared:

* the episodes an RL step samples (env, backend and model, sampling, prompts per step, group size,
  episode limits) are :class:`~ludic_core.run.configs.EpisodesConfig`, the same table as
  ``ludic eval`` and ``ludic rollouts``: ``episodes`` is the prompts per step and
  ``samples_per_prompt`` the group size;
* the optimiser and micro-batching are :class:`~ludic_train.config.TrainerConfig` (the ``[trainer]``
  table); its ``pad_token_id`` defaults to the tokenizer's, so it is left out of the TOML;
* the settings every backend shares (learning rate, LoRA rank, checkpoint and eval intervals; 0
  disables an interval) are :mod:`ludic_core.run.training`'s, extended here with the local trainer's.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError
from ludic_core.run.configs import BackendConfig, RunConfig, at_least
from ludic_core.run.rl import DEFAULT_ALGORITHM, RLEpisodesConfig
from ludic_core.run.training import LoraSettings, RunSettings
from ludic_core.validation import boolean, int_at_least, number_in, positive_number
from ludic_train.checkpoint import CheckpointConfig
from ludic_train.config import FROM_TOKENIZER, TrainerConfig

__all__ = [
    "FROM_TOKENIZER",
    "LocalLoraSettings",
    "LocalRunSettings",
    "OfflineRLRunConfig",
    "OfflineRunConfig",
    "PipelineRunConfig",
    "PipelineSettings",
    "RLRunConfig",
    "SFTRunConfig",
    "WarmStartSettings",
]


@attrs.frozen(kw_only=True)
class LocalLoraSettings(LoraSettings):
    """The ``[lora]`` table of the local trainer: ``rank`` (0: full fine-tuning) as on every backend,
    plus ``alpha`` (None: ``2 * rank``), ``dropout``, ``include_lm_head`` (adapt the output head too;
    the random test model learns nothing without it) and ``top_layers`` (adapt only the top N decoder
    layers, None: all of them; backpropagation then stops below them, which makes a CPU step several
    times cheaper and holds far fewer activations)."""

    alpha: float | None = attrs.field(default=None, validator=positive_number(optional=True))
    dropout: float = attrs.field(default=0.0, validator=number_in(0.0, 1.0))
    include_lm_head: bool = attrs.field(default=False, validator=boolean())
    top_layers: int | None = attrs.field(default=None, validator=int_at_least(1, optional=True))


@attrs.frozen(kw_only=True)
class LocalRunSettings(RunSettings):
    """The ``[run]`` table of the local trainer: ``checkpoint_every`` (0: no checkpoints) as on every
    backend, the newest ``max_to_keep`` checkpoints kept; ``loggers``: ``print``, ``rich``, ``jsonl``
    (``<run_dir>/metrics.jsonl``), ``wandb``; ``save_final``: export the trained (merged) model to
    ``<run_dir>/final``."""

    max_to_keep: int = attrs.field(
        default=attrs.fields(CheckpointConfig).max_to_keep.default, validator=at_least(1)
    )
    loggers: tuple[Literal["print", "rich", "jsonl", "wandb"], ...] = ("print", "jsonl")
    save_final: bool = False


@attrs.frozen(kw_only=True)
class WarmStartSettings:
    """The ``[warm_start]`` table of the local RL recipes: before RL, SFT on ``episodes`` episodes that
    the registered scripted teacher ``teacher`` (entry-point group ``ludic.scripted_teachers``) plays
    through the run's own env, protocol and agent, for ``steps`` optimiser steps at ``lr`` in batches of
    ``batch_size`` episodes (:mod:`ludic_train.recipes.warm_start`). ``teacher`` empty: no warm start.
    A resumed run that has a checkpoint skips it (the checkpoint holds the warmed-up weights)."""

    teacher: str = ""
    episodes: int = attrs.field(default=64, validator=at_least(1))
    steps: int = attrs.field(default=20, validator=at_least(1))
    lr: float = attrs.field(default=2e-3, validator=positive_number())
    batch_size: int = attrs.field(default=16, validator=at_least(1))


@attrs.frozen(kw_only=True)
class RLRunConfig(RLEpisodesConfig):
    """On-policy RL on an env with the local Trainer (``ludic train tictactoe-grpo``, ``gsm8k-grpo`` …).

    The RL table (env, model, sampling, prompts x group per step, ``steps``, ``algorithm``, evaluation)
    is :class:`~ludic_core.run.rl.RLEpisodesConfig`; the model being trained samples its own
    episodes through the ``local`` backend. Every ``trainer.eval_every_steps`` steps (and at the start
    with ``trainer.eval_at_start``) the evaluation episodes are scored with the env's outcome rates.
    ``[warm_start]``: an SFT stage on a scripted teacher's episodes before RL (:class:`WarmStartSettings`).
    """

    trainer: TrainerConfig = attrs.field(factory=lambda: TrainerConfig(pad_token_id=FROM_TOKENIZER))
    lora: LocalLoraSettings = attrs.field(factory=LocalLoraSettings)
    run: LocalRunSettings = attrs.field(factory=LocalRunSettings)
    warm_start: WarmStartSettings = attrs.field(factory=WarmStartSettings)
    chat_template: str | None = None
    """A Jinja chat template file, for a tokenizer that has none."""


@attrs.frozen(kw_only=True)
class OfflineRunConfig(RunConfig):
    """Training on JSONL files of rollouts (``ludic rollouts ... -o`` writes them) or SAW items: what
    the offline recipes share.

    ``model`` and ``device`` are what the ``local`` backend loads and where (a model directory,
    ``smollm2`` or ``tiny``); the run trains ``epochs`` passes over ``data`` in batches of
    ``batch_size`` items."""

    model: str
    data: tuple[str, ...]
    epochs: int = attrs.field(default=1, validator=at_least(1))
    batch_size: int = attrs.field(default=8, validator=at_least(1))
    device: str = attrs.field(default=attrs.fields(BackendConfig).device.default)
    trainer: TrainerConfig = attrs.field(
        factory=lambda: TrainerConfig(pad_token_id=FROM_TOKENIZER, lr=2e-5, publish_every_steps=0)
    )
    lora: LocalLoraSettings = attrs.field(factory=lambda: LocalLoraSettings(rank=0))
    run: LocalRunSettings = attrs.field(factory=lambda: LocalRunSettings(checkpoint_every=100))

    def __attrs_post_init__(self) -> None:
        if not self.data:
            raise ConfigError(f"{type(self).__name__}.data must list at least one JSONL file, got []")


@attrs.frozen(kw_only=True)
class SFTRunConfig(OfflineRunConfig):
    """Supervised fine-tuning on the model's own actions in the files, those of rollouts whose total
    reward is below ``min_reward`` left out."""

    min_reward: float | None = None
    length_normalize: bool = True


@attrs.frozen(kw_only=True)
class OfflineRLRunConfig(OfflineRunConfig):
    """RL on collected token-level rollouts: the registered preset ``algorithm`` (with
    ``algorithm_kwargs``) credits them exactly as online (groups from the ``group_id`` and
    ``group_size`` that ``ludic rollouts -k`` records) and its loss trains on the behaviour logprobs
    they carry."""

    algorithm: str = DEFAULT_ALGORITHM
    algorithm_kwargs: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PipelineSettings:
    """Where a pipeline's actors and learner meet: the Redis list ``queue_key`` at ``redis_url`` for
    batches, and ``weights_dir`` (shared by all of them) for the learner's weights.

    ``max_queue_len``: an actor waits while the queue holds this many batches, up to ``wait_timeout_s``
    (the learner waits as long for a batch); ``actor_batches``: batches an actor pushes before it
    stops (0: until interrupted); ``clear_queue``: the learner empties the queue when it starts."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    queue_key: str = "ludic:pipeline"
    weights_dir: str = "runs/pipeline-weights"
    max_queue_len: int = attrs.field(default=32, validator=at_least(1))
    wait_timeout_s: float = attrs.field(default=600.0, validator=positive_number())
    actor_batches: int = attrs.field(default=0, validator=at_least(0))
    clear_queue: bool = attrs.field(default=False, validator=boolean())


@attrs.frozen(kw_only=True)
class PipelineRunConfig(RLRunConfig):
    """Pipeline RL (``ludic train pipeline-actor`` / ``pipeline-learner``): actors sample episodes as in
    :class:`RLRunConfig` and push credited batches to Redis; the learner trains on them and publishes
    its weights, which the actors load between batches. Actors and learner read the same config file,
    so they agree on the model, the env, the group size and the algorithm; each gets its own
    ``run_dir``. ``trainer.max_lag`` bounds how stale an item may be."""

    pipeline: PipelineSettings = attrs.field(factory=PipelineSettings)
