"""Tinker checkpoints named so that the trainer step can be recovered on resume."""

from __future__ import annotations

import re

import attrs

from ludic_core.errors import ConfigError

__all__ = ["TinkerCheckpoint"]

_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9_.-]+)-step(?P<step>\d{6,})$")


@attrs.frozen
class TinkerCheckpoint:
    """A ``save_state`` checkpoint: its ``tinker://…/weights/<name>`` path and the trainer step."""

    path: str
    step: int

    @staticmethod
    def name_for(prefix: str, step: int) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix):
            raise ConfigError(
                f"checkpoint prefix may hold only letters, digits, '_', '.', '-'; got {prefix!r}"
            )
        return f"{prefix}-step{step:06d}"

    @classmethod
    def from_path(cls, path: str) -> TinkerCheckpoint:
        """Parse a path written by :meth:`TinkerTrainer.save_checkpoint` (the step is in the name)."""
        if not path.startswith("tinker://") or "/weights/" not in path:
            raise ConfigError(
                f"not a Tinker training checkpoint path (tinker://<run>/weights/<name>): {path!r}"
            )
        name = path.rsplit("/", 1)[1]
        match = _NAME.match(name)
        if match is None:
            raise ConfigError(
                f"checkpoint name {name!r} does not carry a step ('<prefix>-stepNNNNNN'); pass the step explicitly"
            )
        return cls(path=path, step=int(match["step"]))
