"""Fan one ``log`` call out to several loggers."""

from __future__ import annotations

from collections.abc import Mapping

from ludic_core.loggers.base import TrainingLogger
from ludic_core.logs import get_logger

__all__ = ["TeeLogger"]

log = get_logger(__name__)


class TeeLogger:
    """Calls every logger in order. A failing logger (e.g. a network hiccup in W&B) is reported and
    skipped so that it cannot stop training; pass ``raise_errors=True`` to propagate instead."""

    def __init__(self, *loggers: TrainingLogger, raise_errors: bool = False) -> None:
        self.loggers = list(loggers)
        self.raise_errors = raise_errors

    def log(self, step: int, stats: Mapping[str, float]) -> None:
        for logger in self.loggers:
            try:
                logger.log(step, stats)
            except Exception as exc:
                if self.raise_errors:
                    raise
                log.warning("logger.failed", logger=type(logger).__name__, error=repr(exc))

    def close(self) -> None:
        for logger in self.loggers:
            try:
                logger.close()
            except Exception as exc:
                if self.raise_errors:
                    raise
                log.warning("logger.close_failed", logger=type(logger).__name__, error=repr(exc))
