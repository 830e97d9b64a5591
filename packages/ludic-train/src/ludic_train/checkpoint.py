"""Atomic, resumable training checkpoints.

Layout under ``output_dir``: ``step_000010/`` holds ``model.pt`` (all weights, or ``weights="trainable"``),
``optimizer.pt``, ``state.pt`` (trainer state, batch-source positions, RNG states), ``trainer_state.json``
and ``manifest.json`` (sha256 and size per file, step, run line, parent); ``latest.json`` names the newest.
A checkpoint is written to a hidden fsynced temporary directory and renamed into place, so every
``step_*`` is complete; loading verifies the manifest and reads with ``torch.load(weights_only=True)``.
Resuming the newest falls back, with a warning, to older checkpoints that verify. A failed save raises
:class:`CheckpointSaveError` (checkpoint, file, cause, free space) and leaves earlier ones intact. Each
save belongs to a *line*: resuming an older checkpoint starts a new line, and ``latest.json`` only moves
forward along the line that saved last, so an abandoned continuation is never "latest". Under FSDP2 rank
0 writes gathered state dicts and ``state.pt`` keeps every rank's batch-source position, so a checkpoint
resumes with as many ranks as wrote it. Details: docs/packages/ludic-train.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from ludic_core.durable_files import fsync_dir, write_json_atomic
from ludic_core.errors import ConfigError, DataError
from ludic_core.logs import get_logger
from ludic_core.validation import boolean, int_at_least
from ludic_train.checkpoint_files import (
    MANIFEST,
    CheckpointSaveError,
    read_manifest,
    save_torch_file,
    sha256_of,
    torch_load,
    verify_checkpoint,
    write_synced,
    writing,
)
from ludic_train.rank_zero import barrier, gather_on_rank_zero, rank, world_size
from ludic_train.rng_states import RNGState, capture_rng_states, restore_rng_states
from ludic_train.weights import is_fsdp_module

if TYPE_CHECKING:
    import torch

__all__ = [
    "CheckpointConfig",
    "CheckpointManager",
    "CheckpointSaveError",
    "LoadedCheckpoint",
    "RNGState",
    "StatefulBatchSource",
    "capture_rng_states",
    "restore_rng_states",
    "verify_checkpoint",
]

log = get_logger(__name__)

_STEP_DIR = re.compile(r"^step_(\d+)$")
_PREV_DIR = re.compile(r"^\.prev-(step_\d+)-")


@runtime_checkable
class StatefulBatchSource(Protocol):
    """A batch source that can report and restore its position (plain data: dicts, lists, numbers,
    strings, tensors)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@attrs.frozen
class CheckpointConfig:
    """``every_n_steps=0`` saves only when asked; ``max_to_keep`` newest checkpoints are kept.

    ``weights="trainable"`` stores only parameters with ``requires_grad`` (e.g. LoRA adapters): small,
    and correct as long as the resumed model is built from the same frozen base.
    """

    output_dir: Path = attrs.field(converter=Path)
    every_n_steps: int = attrs.field(default=0, validator=int_at_least(0))
    max_to_keep: int = attrs.field(default=2, validator=int_at_least(1))
    save_optimizer: bool = attrs.field(default=True, validator=boolean())
    weights: Literal["full", "trainable"] = "full"

    def __attrs_post_init__(self) -> None:
        if self.weights not in ("full", "trainable"):
            raise ConfigError(f"CheckpointConfig.weights must be 'full' or 'trainable', got {self.weights!r}")


@attrs.frozen
class LoadedCheckpoint:
    path: Path
    step: int
    trainer_state: dict[str, Any]


def _rank_source_state(state: Mapping[str, Any], path: Path) -> Any:
    """This rank's batch-source position in a checkpoint's ``state``."""
    by_rank = state.get("batch_source_by_rank", [state["batch_source"]])
    if len(by_rank) != world_size():
        raise DataError(
            f"{path} holds the batch-source positions of {len(by_rank)} data-parallel rank(s) but this run "
            f"has {world_size()}: each rank resumes its own data, so resume with {len(by_rank)} rank(s)"
        )
    return by_rank[rank()]


class CheckpointManager:
    """Saves and loads checkpoints under ``cfg.output_dir`` (see the module docstring for the layout)."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        self.cfg = cfg
        # This manager's line and the checkpoint its next save descends from (set by load()).
        self._line = uuid.uuid4().hex
        self._parent: str | None = None
        if rank() == 0:
            cfg.output_dir.mkdir(parents=True, exist_ok=True)
            self._recover()
        # The other ranks read the directory (resume) only once rank 0 has put it in order.
        barrier()

    def _recover(self) -> None:
        """Undo what a kill in the middle of a save left behind."""
        for prev in self.cfg.output_dir.glob(".prev-step_*"):
            match = _PREV_DIR.match(prev.name)
            final = self.cfg.output_dir / match.group(1) if match else None
            # A re-save killed between moving the old copy aside and moving the new one in: the old
            # copy is the only good one, so it goes back; once the new one is in place it is garbage.
            if final is not None and not (final / "state.pt").is_file():
                if final.exists():
                    shutil.rmtree(final, ignore_errors=True)
                os.rename(prev, final)
                log.warning("checkpoint.recovered", path=str(final), reason="a re-save was interrupted")
            else:
                shutil.rmtree(prev, ignore_errors=True)
        # Leftovers of a save that was killed half-way; never loadable, safe to remove.
        for stale in self.cfg.output_dir.glob(".tmp-step_*"):
            shutil.rmtree(stale, ignore_errors=True)

    # -- queries --

    def should_save(self, step: int) -> bool:
        return self.cfg.every_n_steps > 0 and step % self.cfg.every_n_steps == 0

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Complete checkpoints, oldest first."""
        if not self.cfg.output_dir.is_dir():
            return []
        found = []
        for entry in self.cfg.output_dir.iterdir():
            match = _STEP_DIR.match(entry.name)
            if match and entry.is_dir() and (entry / "state.pt").is_file():
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def _read_latest(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.cfg.output_dir / "latest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _lineage(self) -> list[Path]:
        """Resume candidates, best first: the newest checkpoint of the line ``latest.json`` names, then
        its ancestors (parent links, else older steps); checkpoints of other lines come last, so a
        resume can still fall back to them rather than start over."""
        found = self.checkpoints()
        by_name = {path.name: (step, path) for step, path in found}
        latest = self._read_latest()
        line = latest.get("line") if latest else None
        meta: dict[str, dict[str, Any]] = {}
        for _step, path in found:
            try:
                meta[path.name] = read_manifest(path)
            except DataError as e:
                # Still a candidate (a load verifies it again and skips it, saying why), but its line
                # and parent are unknown: it is ordered by step among the other lines' checkpoints.
                log.warning("checkpoint.manifest_unreadable", path=str(path), error=str(e))
                meta[path.name] = {}
        on_line = [(step, path) for step, path in found if line and meta[path.name].get("line") == line]
        named = latest.get("last_checkpoint") if latest else None
        if on_line:
            step, current = on_line[-1]
        elif isinstance(named, str) and named in by_name:
            # A resume of an older checkpoint forked this line and crashed before its first save.
            step, current = by_name[named]
        else:
            return [path for _step, path in reversed(found)]
        order: list[Path] = []
        seen: set[str] = set()
        while True:
            order.append(current)
            seen.add(current.name)
            parent = meta[current.name].get("parent")
            if isinstance(parent, str) and parent in by_name and parent not in seen:
                step, current = by_name[parent]
                continue
            # The parent was pruned or never recorded: continue with the next older step.
            older = [(s, p) for s, p in found if s < step and p.name not in seen]
            if not older:
                break
            step, current = older[-1]
        order.extend(path for _step, path in reversed(found) if path.name not in seen)
        return order

    def latest(self) -> Path | None:
        """The newest checkpoint of the line that saved last (unverified; :meth:`load` verifies)."""
        order = self._lineage()
        return order[0] if order else None

    def resolve(self, target: int | str | os.PathLike[str] | None) -> Path:
        """``None``: the newest checkpoint; an int (or a digit string that is not a path): that step;
        otherwise a checkpoint directory path."""
        if target is None:
            latest = self.latest()
            if latest is None:
                raise DataError(f"no checkpoint found under {self.cfg.output_dir}")
            return latest
        if isinstance(target, bool):
            raise ConfigError(f"resume target must be a step, a path or None, got {target!r}")
        if isinstance(target, int) or (
            isinstance(target, str) and target.isdigit() and not Path(target).exists()
        ):
            path = self.cfg.output_dir / f"step_{int(target):06d}"
            if not (path / "state.pt").is_file():
                have = [s for s, _ in self.checkpoints()]
                raise DataError(
                    f"no checkpoint for step {int(target)} under {self.cfg.output_dir}; have steps {have}"
                )
            return path
        path = Path(target)
        if not (path / "state.pt").is_file():
            raise DataError(f"{path} is not a complete checkpoint directory (no state.pt)")
        return path

    # -- save --

    def save(
        self,
        step: int,
        *,
        model: Any,
        optimizer: torch.optim.Optimizer | None = None,
        trainer_state: Mapping[str, Any] | None = None,
        batch_source: Any = None,
        rngs: Mapping[str, RNGState] | None = None,
    ) -> Path | None:
        """Write checkpoint ``step``; returns its path (``None`` on ranks other than 0).

        Under FSDP2 every rank must call this (the full state dicts are gathered collectively).
        """
        model_state = self._model_state(model)
        optim_state = (
            self._optimizer_state(model, optimizer) if self.cfg.save_optimizer and optimizer else None
        )
        source_states = gather_on_rank_zero(
            batch_source.state_dict() if isinstance(batch_source, StatefulBatchSource) else None
        )
        if rank() != 0:
            barrier()
            return None
        assert source_states is not None
        state: dict[str, Any] = {
            "step": step,
            "time": time.time(),
            "trainer": dict(trainer_state or {}),
            "weights": self.cfg.weights,
            "rng": capture_rng_states(rngs),
        }
        if isinstance(batch_source, StatefulBatchSource):
            state["batch_source"] = source_states[0]
            if len(source_states) > 1:
                state["batch_source_by_rank"] = source_states

        final = self.cfg.output_dir / f"step_{step:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step_{step:06d}-", dir=self.cfg.output_dir))
        try:
            with writing(tmp / "model.pt", final.name):
                save_torch_file(model_state, tmp / "model.pt")
            if optim_state is not None:
                with writing(tmp / "optimizer.pt", final.name):
                    save_torch_file(optim_state, tmp / "optimizer.pt")
            with writing(tmp / "state.pt", final.name):
                save_torch_file(state, tmp / "state.pt")
            readable = {"step": step, "time": state["time"], "weights": self.cfg.weights, **state["trainer"]}
            with writing(tmp / "trainer_state.json", final.name):
                write_synced(tmp / "trainer_state.json", json.dumps(readable, indent=2, default=str).encode())
            files = {
                f.name: {"sha256": sha256_of(f), "bytes": f.stat().st_size}
                for f in sorted(tmp.iterdir())
                if f.is_file()
            }
            parent = self._parent if self._parent != final.name else None
            manifest = {"step": step, "line": self._line, "parent": parent, "files": files}
            with writing(tmp / MANIFEST, final.name):
                write_synced(tmp / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())
                fsync_dir(tmp)
            if final.exists():  # re-saving a step (e.g. after a resume): the old copy stays until the swap
                prev = self.cfg.output_dir / f".prev-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                os.rename(final, prev)
                os.rename(tmp, final)
                fsync_dir(self.cfg.output_dir)
                shutil.rmtree(prev, ignore_errors=True)
            else:
                os.rename(tmp, final)
            fsync_dir(self.cfg.output_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._parent = final.name
        latest = self._read_latest()
        # latest.json only moves forward along this line; a save of an older step of the same line
        # (an explicit save() call) leaves it where it is.
        if not (latest and latest.get("line") == self._line and int(latest.get("step", -1)) > step):
            write_json_atomic(
                self.cfg.output_dir / "latest.json",
                {"last_checkpoint": final.name, "step": step, "line": self._line},
            )
        self._prune()
        log.info("checkpoint.saved", step=step, path=str(final))
        barrier()
        return final

    def _model_state(self, model: Any) -> dict[str, Any]:
        if is_fsdp_module(model):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            full: dict[str, Any] = dict(
                get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            )
        else:
            full = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        if self.cfg.weights == "trainable":
            trainable = {name for name, p in model.named_parameters() if p.requires_grad}
            full = {k: v for k, v in full.items() if k in trainable}
        return full

    def _optimizer_state(self, model: Any, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        if is_fsdp_module(model):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            return get_optimizer_state_dict(
                model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        return optimizer.state_dict()

    def _prune(self) -> None:
        """Keep the ``max_to_keep`` best resume candidates (this line's newest and its ancestors);
        checkpoints of abandoned lines go first."""
        for path in self._lineage()[self.cfg.max_to_keep :]:
            shutil.rmtree(path, ignore_errors=True)

    # -- load --

    def load(
        self,
        target: int | str | os.PathLike[str] | None = None,
        *,
        model: Any,
        optimizer: torch.optim.Optimizer | None = None,
        batch_source: Any = None,
        rngs: Mapping[str, RNGState] | None = None,
    ) -> LoadedCheckpoint:
        """Load ``target`` (see :meth:`resolve`) into the given objects after verifying its files.

        ``target=None`` tries the resume candidates newest first and skips, with a warning naming each
        one and why, those that fail verification or do not load; an explicit target raises instead.
        Nothing is modified until every file of the chosen checkpoint has been read.
        """
        if target is not None:
            path = self.resolve(target)
            files = self._read_checkpoint(path, optimizer is not None)
        else:
            candidates = self._lineage()
            if not candidates:
                raise DataError(f"no checkpoint found under {self.cfg.output_dir}")
            skipped: list[str] = []
            found: tuple[dict[str, Any], Any, Any] | None = None
            for path in candidates:
                try:
                    found = self._read_checkpoint(path, optimizer is not None)
                    break
                except DataError as e:
                    skipped.append(f"{path.name}: {e}")
            if skipped:
                log.warning("checkpoint.skipped", skipped=skipped, loaded=path.name if found else None)
            if found is None:
                raise DataError(f"no checkpoint under {self.cfg.output_dir} verifies: " + "; ".join(skipped))
            files = found
        state, model_state, optim_state = files
        self._load_model(model, model_state, trainable_only=state.get("weights") == "trainable", path=path)
        if optimizer is not None:
            if is_fsdp_module(model):
                from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

                set_optimizer_state_dict(
                    model, optimizer, optim_state, options=StateDictOptions(full_state_dict=True)
                )
            else:
                optimizer.load_state_dict(optim_state)
        if batch_source is not None and isinstance(batch_source, StatefulBatchSource):
            if "batch_source" not in state:
                raise DataError(
                    f"{path} has no batch-source state but {type(batch_source).__name__} expects one"
                )
            batch_source.load_state_dict(_rank_source_state(state, path))
        restore_rng_states(state["rng"], rngs)
        self._adopt(path)
        log.info("checkpoint.loaded", step=state["step"], path=str(path))
        return LoadedCheckpoint(
            path=path, step=int(state["step"]), trainer_state=dict(state.get("trainer", {}))
        )

    def _read_checkpoint(self, path: Path, with_optimizer: bool) -> tuple[dict[str, Any], Any, Any]:
        """``(state, model state, optimizer state or None)`` of a verified checkpoint."""
        verify_checkpoint(path)
        state = torch_load(path / "state.pt")
        model_state = torch_load(path / "model.pt")
        optim_state = None
        if with_optimizer:
            optim_path = path / "optimizer.pt"
            if not optim_path.is_file():
                raise DataError(f"{path} has no optimizer state (saved with save_optimizer=False)")
            optim_state = torch_load(optim_path)
        return state, model_state, optim_state

    def _adopt(self, path: Path) -> None:
        """Continue the loaded checkpoint's line when it is that line's newest; otherwise later saves
        fork a new line from it, so the abandoned continuation never becomes "latest" again."""
        manifest = read_manifest(path)  # verified by the load that adopts it
        line = manifest.get("line")
        step = manifest.get("step")
        newer_on_line = False
        if isinstance(line, str) and isinstance(step, int):
            for other_step, other in self.checkpoints():
                if other_step > step:
                    try:
                        newer_on_line = newer_on_line or read_manifest(other).get("line") == line
                    except DataError:
                        continue
        continues = isinstance(line, str) and not newer_on_line
        self._line = line if isinstance(line, str) and continues else uuid.uuid4().hex
        inside = path.parent.resolve() == self.cfg.output_dir.resolve()
        self._parent = path.name if inside else None
        if inside and not continues and rank() == 0:
            # The fork becomes the run's line before its first save: a crash before then resumes here.
            write_json_atomic(
                self.cfg.output_dir / "latest.json",
                {"last_checkpoint": path.name, "step": manifest.get("step"), "line": self._line},
            )

    def _load_model(
        self, model: Any, model_state: dict[str, Any], *, trainable_only: bool, path: Path
    ) -> None:
        if is_fsdp_module(model):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(
                model, model_state, options=StateDictOptions(full_state_dict=True, strict=not trainable_only)
            )
            return
        if not trainable_only:
            model.load_state_dict(model_state, strict=True)
            return
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        missing, unexpected = trainable - set(model_state), set(model_state) - trainable
        if missing or unexpected:
            raise DataError(
                f"{path}: trainable parameters do not match the model "
                f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
            )
        model.load_state_dict(model_state, strict=False)
