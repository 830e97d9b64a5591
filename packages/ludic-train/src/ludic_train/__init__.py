"""ludic-train: the torch side of Ludic.

The concepts a user needs are importable from the package root::

    from ludic_train import Trainer, TrainerConfig
    from ludic_core.algorithms import grpo

that is the :class:`Trainer` with its :class:`TrainerConfig` (it takes an algorithm spec such as
``grpo()``), the loss protocols, collation, checkpoints, training-curve plots (:func:`plot_metrics`),
:class:`LocalPolicyClient` for colocated runs, offline SFT data, and model wrapping
(:func:`apply_lora`, :func:`shard_model`). What needs no torch lives in ludic-core and is imported from
there: the algorithm specs, presets and preprocessing (``ludic_core.algorithms``), the metrics loggers, the
``PolicyPublisher`` contract and the Redis actor/learner pipeline.

The submodules hold the rest and keep every name importable where it was: ``ludic_train.losses``
(every loss), ``ludic_train.microbatch``, ``ludic_train.weights`` and
``ludic_train.testing`` (tiny models).

The root resolves its names lazily, on first use: ``import ludic_train`` imports neither torch nor any
submodule, and the optional dependencies (``peft``, ``matplotlib``) are imported
only by the features that need them.
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
