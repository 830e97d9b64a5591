"""ludic-train: the torch side of Ludic.

The root exports what a user needs first: :class:`Trainer` and :class:`TrainerConfig` (which take an
algorithm spec such as ``ludic_core.algorithms.grpo()``), the loss protocols, collation, checkpoints,
:func:`plot_metrics`, :class:`LocalPolicyClient` for colocated runs, offline SFT data, and
:func:`apply_lora` / :func:`shard_model`. Submodules hold the rest (``ludic_train.losses``,
``microbatch``, ``weights``, ``testing``). What needs no torch (algorithm specs, metrics loggers,
``PolicyPublisher``, the Redis pipeline) lives in ludic-core. Names resolve on first use:
``import ludic_train`` imports neither torch nor ``peft`` nor ``matplotlib``.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost more than the rest of this module.
# Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
    from ludic_train.collate import collate_saw_items
    from ludic_train.config import TrainerConfig
    from ludic_train.fsdp import shard_model
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.lora import apply_lora
    from ludic_train.losses.base import Loss, SequenceLoss, TokenLoss
    from ludic_train.microbatch import collate_micro_batches
    from ludic_train.plots import (
        MetricSeries,
        Panel,
        ReferenceLine,
        draw_panels,
        plot_metrics,
        plot_panels,
        read_metric_series,
    )
    from ludic_train.sft import load_sft_items, sft_batch_source
    from ludic_train.trainer import Trainer

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
