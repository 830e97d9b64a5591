"""Training loggers: ``log(step, stats)`` with canonical ``train/``, ``eval/`` and ``perf/`` keys.

* :class:`~ludic_train.loggers.console.RichConsoleLogger` — a rich live panel with a progress bar;
  :class:`~ludic_train.loggers.console.PrintLogger` — one plain line per step;
* :class:`~ludic_train.loggers.jsonl.JsonlLogger` — one JSON object per call, appended and flushed;
* :class:`~ludic_train.loggers.wandb.WandbLogger` — Weights & Biases (``ludic-train[wandb]``);
* :class:`~ludic_train.loggers.tee.TeeLogger` — fans out to several loggers.
"""
