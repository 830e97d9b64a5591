"""The pieces every local recipe builds the same way: the model (with LoRA, sharded with FSDP2 under
``torchrun``), the loggers, the checkpoint manager, and the Trainer config with the tokenizer's pad id;
and the data-parallel launch they run in.

``torchrun --nproc-per-node N -m ludic_core.cli train <recipe> ...`` starts N copies of ``ludic train``
with ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set. :func:`data_parallel` then joins them in one
process group (gloo for CPU tensors, NCCL for CUDA ones), :func:`build_model` shards the model across
them, rank 0 alone writes the run directory and the logs, and checkpoints are gathered collectively
(rank 0 writes). Each recipe splits its data by rank (:func:`~ludic_core.run.ranks.launched_ranks`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from ludic_core.errors import ConfigError
from ludic_core.loggers.base import TrainingLogger
from ludic_core.run.ranks import Ranks, launched_ranks
from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.cli_backend import load_local_model
from ludic_train.config import TrainerConfig
from ludic_train.recipes.config import FROM_TOKENIZER, LocalLoraSettings, LocalRunSettings

__all__ = [
    "build_checkpointer",
    "build_logger",
    "build_model",
    "check_ranks_agree",
    "data_parallel",
    "on_main_rank",
    "rank_device",
    "run_keeping",
    "trainer_config",
]

T = TypeVar("T")

PROCESS_GROUP_TIMEOUT_ENV = "LUDIC_DIST_TIMEOUT_S"
"""Seconds a rank waits in a collective for the others (default 1800): it must outlast the longest
thing one rank does alone, e.g. a pipeline learner waiting for actor batches, or rank 0 writing a
checkpoint."""


def _process_group_timeout_s() -> float:
    raw = os.environ.get(PROCESS_GROUP_TIMEOUT_ENV, "1800")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{PROCESS_GROUP_TIMEOUT_ENV}={raw!r}: expected seconds > 0")
    return value


@contextlib.contextmanager
def data_parallel() -> Iterator[Ranks]:
    """Under ``torchrun`` (``WORLD_SIZE > 1``): join the process group for the block, gloo for CPU
    tensors and NCCL for CUDA ones (each rank on GPU ``LOCAL_RANK``), with a timeout on every collective
    (``LUDIC_DIST_TIMEOUT_S``); a plain run does nothing. Yields the ranks."""
    ranks = launched_ranks()
    if not ranks.distributed:
        yield ranks
        return
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    backend = "gloo"
    # A node with fewer GPUs than ranks (or none) trains on CPUs, over gloo alone; every rank of the
    # node decides alike, so they agree on the backend.
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", ranks.world_size))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size:
        torch.cuda.set_device(ranks.local_rank)
        backend = "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend, timeout=timedelta(seconds=_process_group_timeout_s()))
    try:
        yield ranks
    finally:
        dist.destroy_process_group()


def rank_device(device: str) -> str:
    """Where this rank trains: ``cuda`` becomes this rank's GPU (``cuda:LOCAL_RANK``) under torchrun."""
    ranks = launched_ranks()
    if ranks.distributed and device.split(":")[0] == "cuda":
        return f"cuda:{ranks.local_rank}"
    return device


def on_main_rank(compute: Callable[[], T], what: str) -> T:
    """``compute()`` on rank 0, its result handed to every rank; when it raises, rank 0 raises that
    error and the other ranks one quoting it, so no rank waits for the others until the process
    group's timeout."""
    ranks = launched_ranks()
    if not ranks.distributed:
        return compute()
    from ludic_train.rank_zero import share_rank_zero_outcome

    value: T | None = None
    failure: Exception | None = None
    if ranks.main:
        try:
            value = compute()
        except Exception as exc:
            failure = exc
    result: T = share_rank_zero_outcome(failure, what, value)
    return result


def check_ranks_agree(value: Any, what: str) -> None:
    """Raise on every rank unless all ranks hold the same ``value`` (e.g. the step they resumed at: a
    run directory that some ranks cannot see would have them train different numbers of steps)."""
    ranks = launched_ranks()
    if not ranks.distributed:
        return
    import torch.distributed as dist

    values: list[Any] = [None] * ranks.world_size
    dist.all_gather_object(values, value)
    if len(set(map(repr, values))) > 1:
        raise ConfigError(
            f"the data-parallel ranks disagree on {what}: {values} (rank by rank); every rank must see "
            "the same run directory (a shared file system across the learner's nodes)"
        )


def _read_chat_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"chat_template: {path!r} is not a readable file ({exc})") from exc


def build_model(
    name: str, *, device: str, lora: LocalLoraSettings, chat_template: str | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the local backend's model (a directory, ``smollm2`` or ``tiny``), with
    LoRA adapters unless ``lora.rank`` is 0; under ``torchrun``, on this rank's device and sharded
    with FSDP2 (inside :func:`data_parallel`).

    Every rank builds the same full model before sharding it: the same directory or seeded config,
    and LoRA's initial adapters drawn from torch's default generator, which every process starts with
    the same seed."""
    # A template file that is not there fails before the model loads (minutes for a large one).
    template = None if chat_template is None else _read_chat_template(chat_template)
    # Training wants float32 master weights whatever dtype the directory was saved in.
    model, tokenizer = load_local_model(name, device=rank_device(device), dtype="float32")
    if template is not None:
        tokenizer.chat_template = template
    if lora.rank:
        from ludic_train.lora import apply_lora, top_layers

        model = apply_lora(
            model,
            rank=lora.rank,
            alpha=lora.alpha,
            dropout=lora.dropout,
            include_lm_head=lora.include_lm_head,
            layers=(
                None
                if lora.top_layers is None
                else top_layers(model, lora.top_layers, field="lora.top_layers")
            ),
        )
    if launched_ranks().distributed:
        from ludic_train.fsdp import shard_model

        model = shard_model(model)
    return model, tokenizer


def trainer_config(config: TrainerConfig, tokenizer: Any, *, device: str | None = None) -> TrainerConfig:
    """``config`` with the tokenizer's pad id where it says :data:`FROM_TOKENIZER`, and on ``device``
    (where :func:`build_model` put the model) unless it names a device itself."""
    if config.pad_token_id == FROM_TOKENIZER:
        config = attrs.evolve(config, pad_token_id=tokenizer)
    if device is not None and config.device is None:
        config = attrs.evolve(config, device=rank_device(device))
    return config


def build_checkpointer(run: LocalRunSettings, run_dir: Path, *, lora: LocalLoraSettings) -> CheckpointManager:
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
    """A tee of the named loggers (``print``: one short line per step, the key numbers of
    :data:`~ludic_core.loggers.console.STEP_SUMMARY`; ``rich``; ``jsonl``: every metric, to
    ``metrics_path``; ``wandb``); None when ``names`` is empty. ``none`` is ignored, any other name refused."""
    from ludic_core.loggers.tee import TeeLogger

    loggers: list[TrainingLogger] = []
    for name in names:
        if name == "print":
            from ludic_core.loggers.console import STEP_SUMMARY, PrintLogger

            loggers.append(PrintLogger(labels=STEP_SUMMARY))
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
    run: LocalRunSettings,
    run_dir: Path,
    *,
    lora: LocalLoraSettings,
    resume: bool,
    dry_run: bool,
    total_steps: int,
    title: str,
) -> dict[str, Any]:
    """The Trainer arguments every local recipe takes from its ``[run]`` table: the checkpointer, a
    resume from its newest checkpoint on ``--resume``, and the loggers (none in a dry run, and only
    on rank 0 under torchrun: the Trainer logs the whole batch's metrics there)."""
    return {
        "checkpointer": build_checkpointer(run, run_dir, lora=lora),
        "resume_from": "latest" if resume else None,
        "logger": None
        if dry_run or not launched_ranks().main
        else build_logger(
            run.loggers, metrics_path=run_dir / "metrics.jsonl", total_steps=total_steps, title=title
        ),
    }
