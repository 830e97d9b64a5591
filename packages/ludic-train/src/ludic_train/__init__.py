"""ludic-train: the torch side of Ludic.

Import from the submodules: ``ludic_train.losses`` and ``ludic_train.presets`` (algorithms),
``ludic_train.collate`` / ``ludic_train.microbatch`` (SAW items → tensors), ``ludic_train.trainer``
(``Trainer``) with ``ludic_train.config`` (``TrainerConfig``), ``ludic_train.checkpoint``,
``ludic_train.loggers``, ``ludic_train.local_client`` (``LocalPolicyClient`` for colocated runs),
``ludic_train.publisher`` (the ``PolicyPublisher`` contract), ``ludic_train.sft`` (offline SFT data),
``ludic_train.pipeline`` (actor/learner over Redis), ``ludic_train.lora`` / ``ludic_train.fsdp`` (model wrapping) and ``ludic_train.testing`` (tiny models).
"""

__version__ = "0.1.0"
