"""The SFT recipe (``tictactoe-sft``): masked cross-entropy on the model's own actions in rollout or SAW
JSONL files (``ludic rollouts tictactoe --keep ... -o winners.jsonl`` writes them), the same Trainer
with the ``sft`` preset over an offline, resumable batch source; nothing is published. How the
batches split over torchrun ranks: :mod:`ludic_train.recipes.offline`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ludic_train.recipes.config import SFTRunConfig
from ludic_train.recipes.offline import check_offline, train_offline

__all__ = ["check_sft", "run_sft"]


def check_sft(config: SFTRunConfig) -> None:
    check_offline(config)


def run_sft(config: SFTRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    from ludic_core.algorithms.presets import sft

    def sft_source(tokenizer: Any, paths: list[str], **share: Any) -> Any:
        from ludic_core.retokenize import TokenizerTemplate
        from ludic_train.sft import sft_batch_source

        # Message-level rollouts (`ludic rollouts --backend openai`) carry no token ids: they are rendered
        # in the student's own chat template. Token-level ones train on the tokens they were sampled as.
        template = TokenizerTemplate(tokenizer)
        return sft_batch_source(paths, min_reward=config.min_reward, chat_template=template, **share)

    return asyncio.run(
        train_offline(
            config,
            run_dir,
            algorithm=sft(length_normalize=config.length_normalize),
            make_source=sft_source,
            title="sft",
            dry_run=dry_run,
            resume=resume,
        )
    )
