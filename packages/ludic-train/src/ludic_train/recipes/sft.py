"""The SFT recipe (``tictactoe-sft``): masked cross-entropy on the model's own actions in rollout or SAW
JSONL files (``ludic rollouts tictactoe --keep ... -o winners.jsonl`` writes them), the same Trainer
with the ``sft`` preset over an offline, resumable batch source; nothing is published.

Under ``torchrun`` with N ranks, ``batch_size`` stays the batch of one optimiser step: rank ``r``
trains on items ``r, r + N, ...`` of each batch (``batch_size / N`` of them), so the run takes the
same steps over the same data as one process would (less an epoch's last ``len(data) % N`` items,
left out so that every rank takes the same number of steps)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from ludic_core.errors import ConfigError
from ludic_train.recipes.config import SFTRunConfig

__all__ = ["check_sft", "run_sft"]


def check_sft(config: SFTRunConfig) -> None:
    from ludic_train.recipes.components import launched_ranks

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


async def _run(config: SFTRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    from ludic_core.algorithms.presets import sft
    from ludic_core.retokenize import TokenizerTemplate
    from ludic_train.recipes.components import (
        build_model,
        check_ranks_agree,
        launched_ranks,
        run_keeping,
        trainer_config,
    )
    from ludic_train.sft import sft_batch_source
    from ludic_train.trainer import Trainer

    ranks = launched_ranks()
    model, tokenizer = build_model(config.model, device=config.device, lora=config.lora)
    # Message-level rollouts (`ludic rollouts --backend openai`) carry no token ids: they are rendered
    # in the student's own chat template. Token-level ones train on the tokens they were sampled as.
    source = sft_batch_source(
        list(config.data),
        batch_size=config.batch_size // ranks.world_size,
        min_reward=config.min_reward,
        seed=config.seed,
        chat_template=TokenizerTemplate(tokenizer),
        rank=ranks.rank,
        world_size=ranks.world_size,
    )
    if source.items_per_epoch == 0:
        raise ConfigError(f"data: no trainable items in {list(config.data)} (min_reward={config.min_reward})")
    # items_per_epoch and the batch size are this rank's: every rank counts the same steps.
    steps = config.epochs * math.ceil(source.items_per_epoch / source.batch_size)
    algorithm = sft(length_normalize=config.length_normalize)
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
            title="sft",
        ),
    )
    try:
        if dry_run:
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            return {
                "model": f"{type(model).__name__} ({config.model}): {trainable:,} trainable parameters",
                "tokenizer": f"{type(tokenizer).__name__}: {len(tokenizer):,} tokens",
                "data": f"{source.items_per_epoch * ranks.world_size} items, {steps} steps of {config.batch_size}",
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


def run_sft(config: SFTRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    return asyncio.run(_run(config, run_dir, dry_run=dry_run, resume=resume))
