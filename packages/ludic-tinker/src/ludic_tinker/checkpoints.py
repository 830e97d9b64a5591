"""Tinker checkpoints, and the local record that makes them resumable like a local run.

The weights and Adam state of a Tinker run live on the service (``save_state`` returns a
``tinker://…/weights/<name>`` path). What the service does not hold is the rest of the run's state:
where the batch source stood (the dataset position, the requests provider's RNG, the Redis pipeline's
claims). With ``TinkerTrainerConfig.checkpoint_dir`` set, each checkpoint also writes one small JSON
record there, ``step_NNNNNNNN.json``: the step, the ``tinker://`` path and the batch source's
``state_dict``. The directory plays the part a local run's checkpoint directory plays for
ludic-train's ``Trainer``: :meth:`TinkerCheckpoint.latest_in` finds the newest record, and
``TinkerTrainer.resume`` restores the weights, Adam state, step and batch-source position from it.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import attrs

from ludic_core.durable_files import write_json_atomic
from ludic_core.errors import ConfigError, DataError
from ludic_core.validation import check_int

__all__ = ["TinkerCheckpoint"]

_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9_.-]+)-step(?P<step>\d{6,})$")
_RECORD = re.compile(r"^step_(?P<step>\d{8})\.json$")
RECORD_VERSION = 1


@attrs.frozen
class TinkerCheckpoint:
    """A ``save_state`` checkpoint: its ``tinker://…/weights/<name>`` path, the trainer step, and (when
    read from a local record) the batch source's state at that step."""

    path: str
    step: int
    batch_source_state: dict[str, Any] | None = attrs.field(default=None, eq=False, repr=False)

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

    @classmethod
    def resolve(cls, target: TinkerCheckpoint | str | os.PathLike[str]) -> TinkerCheckpoint:
        """A checkpoint from what a user may name: a :class:`TinkerCheckpoint`, a ``tinker://`` path, a
        record file, or a checkpoint directory (its newest record)."""
        if isinstance(target, TinkerCheckpoint):
            return target
        if isinstance(target, str) and target.startswith("tinker://"):
            return cls.from_path(target)
        path = Path(target)
        if path.is_dir():
            latest = cls.latest_in(path)
            if latest is None:
                raise ConfigError(f"checkpoint directory {str(path)!r} holds no step_NNNNNNNN.json record")
            return latest
        if path.is_file():
            return cls.read_record(path)
        raise ConfigError(
            f"no Tinker checkpoint at {str(target)!r}: expected a tinker:// path, a record file or a "
            "checkpoint directory"
        )

    # -- local records -----------------------------------------------------------------------------

    def write_record(self, directory: str | os.PathLike[str]) -> Path:
        """Write this checkpoint's record into ``directory`` atomically (a crash leaves the previous
        records intact, never a torn one) and return its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        record = {
            "record_version": RECORD_VERSION,
            "step": self.step,
            "tinker_path": self.path,
            "batch_source": self.batch_source_state,
            "saved_at": time.time(),
        }
        final = directory / f"step_{self.step:08d}.json"
        write_json_atomic(final, record)
        return final

    @classmethod
    def read_record(cls, path: str | os.PathLike[str]) -> TinkerCheckpoint:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read Tinker checkpoint record {str(path)!r}: {exc}") from exc
        if not isinstance(data, dict) or data.get("record_version") != RECORD_VERSION:
            raise DataError(
                f"{str(path)!r} is not a Tinker checkpoint record of version {RECORD_VERSION}: "
                f"record_version={data.get('record_version') if isinstance(data, dict) else data!r}"
            )
        tinker_path, state = data.get("tinker_path"), data.get("batch_source")
        step = check_int(f"checkpoint record {str(path)!r}: step", data.get("step"), 0, error=DataError)
        if not isinstance(tinker_path, str) or not tinker_path.startswith("tinker://"):
            raise DataError(f"checkpoint record {str(path)!r}: tinker_path {tinker_path!r} is not tinker://")
        if state is not None and not isinstance(state, dict):
            raise DataError(f"checkpoint record {str(path)!r}: batch_source must be a map, got {state!r}")
        return cls(path=tinker_path, step=step, batch_source_state=state)

    @classmethod
    def latest_in(cls, directory: str | os.PathLike[str]) -> TinkerCheckpoint | None:
        """The newest record in ``directory`` (``None`` if there is none, or no such directory)."""
        directory = Path(directory)
        if not directory.is_dir():
            return None
        steps = sorted(
            int(m["step"]) for p in directory.iterdir() if (m := _RECORD.match(p.name)) is not None
        )
        return cls.read_record(directory / f"step_{steps[-1]:08d}.json") if steps else None
