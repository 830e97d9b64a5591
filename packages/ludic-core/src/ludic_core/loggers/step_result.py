"""What one training step reports, whatever the backend trains on."""

from __future__ import annotations

__all__ = ["StepResult"]


class StepResult(dict[str, float]):
    """The metrics of one optimiser step under the canonical keys (``train/...``, ``perf/...``), as a
    plain dict with a typed name.

    Every trainer returns these from ``train(num_steps)`` and hands them to its ``TrainingLogger``
    (ludic-train's local ``Trainer`` and ludic-tinker's ``TinkerTrainer`` alike), so a script that
    switches backend keeps its logging and its reading of results. ``train/step`` is the step the
    metrics belong to and ``train/loss`` the step's loss.
    """
