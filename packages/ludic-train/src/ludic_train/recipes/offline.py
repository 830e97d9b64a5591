"""The recipes that train on files (``tictactoe-sft``, ``offline-rl``): what they share, and the
offline RL runner.

``offline-rl`` trains a registered algorithm on token-level rollouts that ``ludic rollouts`` collected
from any token-level backend (``local``, ``vllm`` against a running server, ``tinker``): the
algorithm's credit assigner weights them as online (:meth:`OfflineBatchSource.from_rollout_logs`;
GRPO groups are the samples of one prompt, ``-k``), and its loss reads the behaviour logprobs the
server returned, so the first pass is on-policy and later ones are importance-corrected by the loss's
clipping. Message-level rollouts (``--backend openai``) carry neither token ids nor logprobs and are
refused by the trainer's input check, with the fix named.

Under ``torchrun`` with N ranks, ``batch_size`` stays the batch of one optimiser step: rank ``r``
trains on items ``r, r + N, ...`` of each batch (``batch_size / N`` of them), so the run takes the
same steps over the same data as one process would (less an epoch's last ``len(data) % N`` items,
left out so that every rank takes the same number of steps)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.errors import ConfigError
from ludic_core.run.ranks import launched_ranks
from ludic_core.run.rl import registered_algorithm
from ludic_train.recipes.config import OfflineRLRunConfig, OfflineRunConfig

__all__ = ["build_offline_algorithm", "check_offline", "check_offline_rl", "run_offline_rl", "train_offline"]


def check_offline(config: OfflineRunConfig) -> None:
    """What every offline recipe refuses before loading a model: a batch that does not split over
    the torchrun ranks, a data file that does not exist."""

    world_size = launched_ranks().world_size
    if config.batch_size % world_size:
        raise ConfigError(
            f"batch_size = {config.batch_size} does not split over the {world_size} torchrun ranks: "
            "each rank trains on batch_size / ranks items of every batch"
        )
    missing = [path for path in config.data if not Path(path).is_file()]
    if missing:
        raise ConfigError(
            f"data: no such file {missing[0]!r} (the JSONL that `ludic rollouts ... -o` writes)"
        )


def build_offline_algorithm(config: OfflineRLRunConfig) -> AlgorithmSpec:
    """The registered preset ``config.algorithm``; its group size comes from the rollouts' meta."""
    return registered_algorithm(config.algorithm, config.algorithm_kwargs)


def check_offline_rl(config: OfflineRLRunConfig) -> None:
    check_offline(config)
    build_offline_algorithm(config)


async def train_offline(
    config: OfflineRunConfig,
    run_dir: Path,
    *,
    algorithm: AlgorithmSpec,
    make_source: Callable[..., Any],
    title: str,
    dry_run: bool,
    resume: bool,
) -> dict[str, Any]:
    """Load ``config.model``, train ``algorithm`` for ``epochs`` passes over this rank's share of the
    data, keep the run (checkpoints, logs, the final export) and return the summary, or in a dry run
    the components built. ``make_source(tokenizer, paths, *, batch_size, seed, rank, world_size)`` builds
    the offline batch source of that share."""
    from ludic_train.recipes.components import build_model, check_ranks_agree, run_keeping, trainer_config
    from ludic_train.trainer import Trainer

    ranks = launched_ranks()
    model, tokenizer = build_model(config.model, device=config.device, lora=config.lora)
    source = make_source(
        tokenizer,
        list(config.data),
        batch_size=config.batch_size // ranks.world_size,
        seed=config.seed,
        rank=ranks.rank,
        world_size=ranks.world_size,
    )
    if source.items_per_epoch == 0:
        raise ConfigError(f"data: no trainable items in {list(config.data)}")
    # items_per_epoch and the batch size are this rank's: every rank counts the same steps.
    steps = config.epochs * math.ceil(source.items_per_epoch / source.batch_size)
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=trainer_config(config.trainer, tokenizer, device=config.device),
        **run_keeping(
            config.run,
            run_dir,
            lora=config.lora,
            resume=resume,
            dry_run=dry_run,
            total_steps=steps,
            title=title,
        ),
    )
    try:
        if dry_run:
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            items = source.items_per_epoch * ranks.world_size
            return {
                "model": f"{type(model).__name__} ({config.model}): {trainable:,} trainable parameters",
                "tokenizer": f"{type(tokenizer).__name__}: {len(tokenizer):,} tokens",
                "data": f"{items} items, {steps} steps of {config.batch_size}",
                "algorithm": f"{algorithm.name} (loss {type(algorithm.loss).__name__})",
                "trainer": f"{type(trainer).__name__} on {trainer.device}, lr {config.trainer.lr}",
            }
        check_ranks_agree(trainer.step, "the step to resume from")
        results = await trainer.train(max(0, steps - trainer.step))
    finally:
        await trainer.aclose()
    if config.run.save_final:
        from ludic_train.weights import export_pretrained

        export_pretrained(model, run_dir / "final", tokenizer=tokenizer)
    return {"steps": trainer.step, "last": dict(results[-1]) if results else {}}


def run_offline_rl(
    config: OfflineRLRunConfig, run_dir: Path, *, dry_run: bool, resume: bool
) -> dict[str, Any]:
    from ludic_core.batch_sources import OfflineBatchSource

    algorithm = build_offline_algorithm(config)

    def rollout_source(_tokenizer: Any, paths: list[str], **share: Any) -> OfflineBatchSource:
        return OfflineBatchSource.from_rollout_logs(paths, credit_assigner=algorithm.credit_assigner, **share)

    return asyncio.run(
        train_offline(
            config,
            run_dir,
            algorithm=algorithm,
            make_source=rollout_source,
            title=f"offline {algorithm.name}",
            dry_run=dry_run,
            resume=resume,
        )
    )
