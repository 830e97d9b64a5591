"""Training loggers: ``log(step, stats)`` with canonical ``train/``, ``eval/`` and ``perf/`` keys.

* :class:`~ludic_core.loggers.console.RichConsoleLogger` — a rich live panel with a progress bar;
  :class:`~ludic_core.loggers.console.PrintLogger` — one plain line per step;
* :class:`~ludic_core.loggers.jsonl.JsonlLogger` — one JSON object per call, appended and flushed;
* :class:`~ludic_core.loggers.wandb.WandbLogger` — Weights & Biases (``ludic-core[wandb]``);
* :class:`~ludic_core.loggers.tee.TeeLogger` — fans out to several loggers;
* :class:`~ludic_core.loggers.step_result.StepResult` — what every trainer's ``train`` returns and logs.
"""
