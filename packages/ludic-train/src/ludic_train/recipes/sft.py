"""The SFT recipe (``tictactoe-sft``): masked cross-entropy on the model's own actions in rollout or SAW
JSONL files (``ludic rollouts tictactoe --keep ... -o winners.jsonl`` writes them), the same Trainer
with the ``sft`` preset over an offline, resumable batch source; nothing is published. How the
batches split over torchrun ranks: :mod:`ludic_train.recipes.offline`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ludic_core.run.ranks import launched_ranks
from ludic_train.recipes.config import SFTRunConfig
from ludic_train.recipes.offline import check_offline

__all__ = ["check_sft", "run_sft"]


def check_sft(config: SFTRunConfig) -> None:
    check_offline(config)


async def _run(config: SFTRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    from ludic_core.algorithms.presets import sft
    from ludic_core.retokenize import TokenizerTemplate
    from ludic_train.recipes.components import build_model
    from ludic_train.recipes.offline import train_offline
    from ludic_train.sft import sft_batch_source

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
    return await train_offline(
        config,
        run_dir,
        model=model,
        tokenizer=tokenizer,
        source=source,
        algorithm=sft(length_normalize=config.length_normalize),
        title="sft",
        dry_run=dry_run,
        resume=resume,
    )


def run_sft(config: SFTRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    return asyncio.run(_run(config, run_dir, dry_run=dry_run, resume=resume))
