"""ludic-tinker: the Tinker backend of Ludic — train with no local GPU.

* :class:`TinkerChatClient` — Tinker sampling as a Ludic ``ChatClient`` (token ids in and out).
* :class:`TinkerTrainer` — ``await trainer.train(num_steps)`` over a ``BatchSource``: one Tinker datum
  per SAW item, ``forward_backward`` + ``optim_step`` remotely, sampler hand-over, checkpoints.
* :class:`TinkerLoss` / :class:`CustomLoss` / :func:`tinker_loss_for` — Tinker's built-in losses and
  how ludic presets map onto them.
* :func:`connect`, :func:`create_training_client` — sessions that fail fast without a key or a service.

Works with tinker SDK 0.25 to 0.38.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost more than the rest of this module.
# Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_tinker._sdk import TinkerRequestError, sdk_version, supported_loss_fns
    from ludic_tinker.checkpoints import TinkerCheckpoint
    from ludic_tinker.client import TinkerChatClient
    from ludic_tinker.datums import item_to_datum, items_to_datums
    from ludic_tinker.losses import BUILTIN_LOSS_INPUTS, CustomLoss, TinkerLoss, tinker_loss_for
    from ludic_tinker.session import (
        TinkerTimeouts,
        connect,
        create_training_client,
        create_training_client_from_checkpoint,
    )
    from ludic_tinker.trainer import AdamConfig, TinkerTrainer, TinkerTrainerConfig

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
