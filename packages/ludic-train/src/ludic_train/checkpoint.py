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

import contextlib
import errno
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from ludic_core.errors import ConfigError, DataError, LudicError
from ludic_core.logs import get_logger
from ludic_core.validation import boolean, int_at_least
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
MANIFEST = "manifest.json"
_HASH_CHUNK = 1 << 20
RNGState = Any  # random.Random | numpy.random.Generator | torch.Generator
# Below this much free space a failed write is reported as a full disk: torch's zip writer reports
# one as "unexpected pos ..." with no errno.
_LOW_SPACE_BYTES = 16 << 20


class CheckpointSaveError(LudicError, OSError):
    """A checkpoint could not be written; the message names the checkpoint, the file and the cause."""


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


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _gather_on_rank0(value: Any) -> list[Any] | None:
    """Every rank's ``value``, in rank order, on rank 0 (None elsewhere); ``[value]`` in one process."""
    if _world_size() == 1:
        return [value]
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * _world_size() if _rank() == 0 else None
    dist.gather_object(value, gathered, dst=0)
    return gathered


def _rank_source_state(state: Mapping[str, Any], path: Path) -> Any:
    """This rank's batch-source position in a checkpoint's ``state``."""
    by_rank = state.get("batch_source_by_rank", [state["batch_source"]])
    if len(by_rank) != _world_size():
        raise DataError(
            f"{path} holds the batch-source positions of {len(by_rank)} data-parallel rank(s) but this run "
            f"has {_world_size()}: each rank resumes its own data, so resume with {len(by_rank)} rank(s)"
        )
    return by_rank[_rank()]


# --- RNG states ------------------------------------------------------------------------------------------


def capture_rng_states(owned: Mapping[str, RNGState] | None = None) -> dict[str, Any]:
    """The global torch (CPU and CUDA), numpy and Python RNG states, plus every generator in ``owned``.

    Ludic code never draws from the global generators, but dropout and user code may; restoring them
    keeps a resumed run on the same path.
    """
    import numpy as np
    import torch

    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": _py_state(random.getstate()),
        "numpy": _np_legacy_state(np.random.get_state(legacy=False)),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    owned_states: dict[str, Any] = {}
    for name, rng in (owned or {}).items():
        if isinstance(rng, random.Random):
            owned_states[name] = {"kind": "python", "state": _py_state(rng.getstate())}
        elif isinstance(rng, torch.Generator):
            owned_states[name] = {"kind": "torch", "state": rng.get_state()}
        elif isinstance(rng, np.random.Generator):
            owned_states[name] = {"kind": "numpy", "state": _np_legacy_state(rng.bit_generator.state)}
        else:
            raise ConfigError(
                f"rng {name!r}: expected random.Random, torch.Generator or numpy Generator, got {type(rng).__name__}"
            )
    states["owned"] = owned_states
    return states


def restore_rng_states(states: Mapping[str, Any], owned: Mapping[str, RNGState] | None = None) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(states["torch"])
    random.setstate(_py_state_back(states["python"]))
    np.random.set_state(_np_state_back(states["numpy"]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    saved = states.get("owned", {})
    for name, rng in (owned or {}).items():
        if name not in saved:
            raise DataError(f"checkpoint has no state for rng {name!r}; it has {sorted(saved)}")
        entry = saved[name]
        if isinstance(rng, random.Random):
            rng.setstate(_py_state_back(entry["state"]))
        elif isinstance(rng, torch.Generator):
            rng.set_state(entry["state"])
        elif isinstance(rng, np.random.Generator):
            rng.bit_generator.state = _np_state_back(entry["state"])
        else:
            raise ConfigError(f"rng {name!r}: unsupported type {type(rng).__name__}")


def _py_state(state: tuple[Any, ...]) -> list[Any]:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _py_state_back(state: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _np_legacy_state(state: Any) -> Any:
    """numpy states hold arrays; store them as lists so ``weights_only`` loading accepts them."""
    import numpy as np

    if isinstance(state, dict):
        return {k: _np_legacy_state(v) for k, v in state.items()}
    if isinstance(state, np.ndarray):
        return {"__ndarray__": state.tolist(), "dtype": str(state.dtype)}
    if isinstance(state, np.integer):
        return int(state)
    return state


def _np_state_back(state: Any) -> Any:
    import numpy as np

    if isinstance(state, dict):
        if "__ndarray__" in state:
            return np.asarray(state["__ndarray__"], dtype=state["dtype"])
        return {k: _np_state_back(v) for k, v in state.items()}
    return state


# --- the manager -----------------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_file(obj: Any, path: Path) -> None:
    import torch

    with path.open("wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def _writing(file: Path, checkpoint: str) -> Iterator[None]:
    """Name the checkpoint, the file and the cause of a failed write (see :class:`CheckpointSaveError`)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        if isinstance(e, CheckpointSaveError):
            raise
        try:
            free: int | None = shutil.disk_usage(file.parent).free
        except OSError:
            free = None
        full = getattr(e, "errno", None) == errno.ENOSPC or (free is not None and free < _LOW_SPACE_BYTES)
        cause = "no space left on the device" if full else f"{type(e).__name__}: {e}"
        space = f"{free} bytes free" if free is not None else "free space unknown"
        raise CheckpointSaveError(
            f"checkpoint {checkpoint}: writing {file.name} failed ({cause}; {space} on {file.parent}). "
            f"The previous checkpoints are intact. Original error: {type(e).__name__}: {e}"
        ) from e


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_manifest(path: Path) -> dict[str, Any]:
    """The checkpoint's manifest; :class:`DataError` when it is missing or unreadable."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        raise DataError(f"{manifest}: missing, so the checkpoint's files cannot be verified")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{manifest}: unreadable manifest ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise DataError(f"{manifest}: not a checkpoint manifest (no 'files' mapping)")
    return data


def verify_checkpoint(path: Path) -> None:
    """Raise :class:`DataError` naming the first file of ``path`` that is missing or differs from the
    manifest (size, then sha256), or the manifest itself when it is missing or unreadable."""
    manifest = _read_manifest(path)
    for name, entry in sorted(manifest["files"].items()):
        file = path / name
        if not file.is_file():
            raise DataError(f"{file}: listed in {MANIFEST} but missing")
        size = file.stat().st_size
        if size != entry.get("bytes"):
            raise DataError(f"{file}: {size} bytes but {MANIFEST} records {entry.get('bytes')} (truncated?)")
        digest = _sha256(file)
        if digest != entry.get("sha256"):
            raise DataError(f"{file}: sha256 {digest} does not match {MANIFEST} ({entry.get('sha256')})")


def _torch_load(path: Path) -> Any:
    """``torch.load(weights_only=True)`` with failures named by file: torch's own messages suggest
    ``weights_only=False``, which would run whatever code a tampered file holds."""
    import torch

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError as e:
        raise DataError(f"{path}: missing; the checkpoint is incomplete, resume from another one") from e
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, zipfile.BadZipFile, OSError) as e:
        raise DataError(
            f"{path}: could not be read with torch.load(weights_only=True) ({type(e).__name__}); the file "
            "is corrupt or was not written by CheckpointManager. Resume from another checkpoint (an older "
            "step, or resume_from='latest' to fall back automatically); do not load it with "
            "weights_only=False"
        ) from e


def _write_bytes(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointManager:
    """Saves and loads checkpoints under ``cfg.output_dir`` (see the module docstring for the layout)."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        self.cfg = cfg
        # This manager's line and the checkpoint its next save descends from (set by load()).
        self._line = uuid.uuid4().hex
        self._parent: str | None = None
        if _rank() == 0:
            cfg.output_dir.mkdir(parents=True, exist_ok=True)
            self._recover()
        # The other ranks read the directory (resume) only once rank 0 has put it in order.
        _barrier()

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
                meta[path.name] = _read_manifest(path)
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
        source_states = _gather_on_rank0(
            batch_source.state_dict() if isinstance(batch_source, StatefulBatchSource) else None
        )
        if _rank() != 0:
            _barrier()
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
            with _writing(tmp / "model.pt", final.name):
                _save_file(model_state, tmp / "model.pt")
            if optim_state is not None:
                with _writing(tmp / "optimizer.pt", final.name):
                    _save_file(optim_state, tmp / "optimizer.pt")
            with _writing(tmp / "state.pt", final.name):
                _save_file(state, tmp / "state.pt")
            readable = {"step": step, "time": state["time"], "weights": self.cfg.weights, **state["trainer"]}
            with _writing(tmp / "trainer_state.json", final.name):
                _write_bytes(tmp / "trainer_state.json", json.dumps(readable, indent=2, default=str).encode())
            files = {
                f.name: {"sha256": _sha256(f), "bytes": f.stat().st_size}
                for f in sorted(tmp.iterdir())
                if f.is_file()
            }
            parent = self._parent if self._parent != final.name else None
            manifest = {"step": step, "line": self._line, "parent": parent, "files": files}
            with _writing(tmp / MANIFEST, final.name):
                _write_bytes(tmp / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())
                _fsync_dir(tmp)
            if final.exists():  # re-saving a step (e.g. after a resume): the old copy stays until the swap
                prev = self.cfg.output_dir / f".prev-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                os.rename(final, prev)
                os.rename(tmp, final)
                _fsync_dir(self.cfg.output_dir)
                shutil.rmtree(prev, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(self.cfg.output_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._parent = final.name
        latest = self._read_latest()
        # latest.json only moves forward along this line; a save of an older step of the same line
        # (an explicit save() call) leaves it where it is.
        if not (latest and latest.get("line") == self._line and int(latest.get("step", -1)) > step):
            _write_json_atomic(
                self.cfg.output_dir / "latest.json",
                {"last_checkpoint": final.name, "step": step, "line": self._line},
            )
        self._prune()
        log.info("checkpoint.saved", step=step, path=str(final))
        _barrier()
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
        state = _torch_load(path / "state.pt")
        model_state = _torch_load(path / "model.pt")
        optim_state = None
        if with_optimizer:
            optim_path = path / "optimizer.pt"
            if not optim_path.is_file():
                raise DataError(f"{path} has no optimizer state (saved with save_optimizer=False)")
            optim_state = _torch_load(optim_path)
        return state, model_state, optim_state

    def _adopt(self, path: Path) -> None:
        """Continue the loaded checkpoint's line when it is that line's newest; otherwise later saves
        fork a new line from it, so the abandoned continuation never becomes "latest" again."""
        manifest = _read_manifest(path)  # verified by the load that adopts it
        line = manifest.get("line")
        step = manifest.get("step")
        newer_on_line = False
        if isinstance(line, str) and isinstance(step, int):
            for other_step, other in self.checkpoints():
                if other_step > step:
                    try:
                        newer_on_line = newer_on_line or _read_manifest(other).get("line") == line
                    except DataError:
                        continue
        continues = isinstance(line, str) and not newer_on_line
        self._line = line if isinstance(line, str) and continues else uuid.uuid4().hex
        inside = path.parent.resolve() == self.cfg.output_dir.resolve()
        self._parent = path.name if inside else None
        if inside and not continues and _rank() == 0:
            # The fork becomes the run's line before its first save: a crash before then resumes here.
            _write_json_atomic(
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
