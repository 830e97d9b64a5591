"""The pieces every local recipe builds the same way: the model (with LoRA), the loggers, the
checkpoint manager, and the Trainer config with the tokenizer's pad id."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.loggers.base import TrainingLogger
from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.cli_backend import load_local_model
from ludic_train.config import TrainerConfig
from ludic_train.recipes.config import FROM_TOKENIZER, LoraSettings, RunSettings

__all__ = ["build_checkpointer", "build_logger", "build_model", "run_keeping", "trainer_config"]


def build_model(
    name: str, *, device: str, lora: LoraSettings, chat_template: str | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the local backend's model (a directory, ``smollm2`` or ``tiny``), with
    LoRA adapters unless ``lora.rank`` is 0."""
    # Training wants float32 master weights whatever dtype the directory was saved in.
    model, tokenizer = load_local_model(name, device=device, dtype="float32")
    if chat_template is not None:
        tokenizer.chat_template = Path(chat_template).read_text()
    if lora.rank:
        from ludic_train.lora import apply_lora

        model = apply_lora(
            model,
            rank=lora.rank,
            alpha=lora.alpha,
            dropout=lora.dropout,
            include_lm_head=lora.include_lm_head,
        )
    return model, tokenizer


def trainer_config(config: TrainerConfig, tokenizer: Any) -> TrainerConfig:
    if config.pad_token_id == FROM_TOKENIZER:
        return attrs.evolve(config, pad_token_id=tokenizer)
    return config


def build_checkpointer(run: RunSettings, run_dir: Path, *, lora: LoraSettings) -> CheckpointManager:
    # A LoRA run's frozen base is rebuilt from the config on resume, so only the adapters are saved.
    return CheckpointManager(
        CheckpointConfig(
            run_dir / "checkpoints",
            every_n_steps=run.checkpoint_every,
            max_to_keep=run.max_to_keep,
            weights="trainable" if lora.rank else "full",
        )
    )


LOGGERS = ("print", "rich", "jsonl", "wandb")


def build_logger(
    names: Sequence[str], *, metrics_path: Path, total_steps: int, title: str
) -> TrainingLogger | None:
    """A tee of the named loggers (``print``, ``rich``, ``jsonl`` to ``metrics_path``, ``wandb``);
    None when ``names`` is empty. ``none`` is ignored, any other name refused."""
    from ludic_core.loggers.tee import TeeLogger

    loggers: list[TrainingLogger] = []
    for name in names:
        if name == "print":
            from ludic_core.loggers.console import PrintLogger

            loggers.append(PrintLogger())
        elif name == "rich":
            from ludic_core.loggers.console import RichConsoleLogger

            loggers.append(RichConsoleLogger(total_steps=total_steps, title=title))
        elif name == "jsonl":
            from ludic_core.loggers.jsonl import JsonlLogger

            loggers.append(JsonlLogger(metrics_path))
        elif name == "wandb":
            from ludic_core.loggers.wandb import WandbLogger

            loggers.append(WandbLogger(name=title.lower().replace(" ", "-")))
        elif name != "none":
            raise ConfigError(f"logger {name!r}: expected one of {', '.join(LOGGERS)} (or none)")
    return TeeLogger(*loggers) if loggers else None


def run_keeping(
    run: RunSettings,
    run_dir: Path,
    *,
    lora: LoraSettings,
    resume: bool,
    dry_run: bool,
    total_steps: int,
    title: str,
) -> dict[str, Any]:
    """The Trainer arguments every local recipe takes from its ``[run]`` table: the checkpointer, a
    resume from its newest checkpoint on ``--resume``, and the loggers (none in a dry run)."""
    return {
        "checkpointer": build_checkpointer(run, run_dir, lora=lora),
        "resume_from": "latest" if resume else None,
        "logger": None
        if dry_run
        else build_logger(
            run.loggers, metrics_path=run_dir / "metrics.jsonl", total_steps=total_steps, title=title
        ),
    }
