"""Atomic, resumable training checkpoints.

Layout under ``output_dir``::

    step_000010/
        model.pt            model weights (all of them, or only trainable ones: ``weights="trainable"``)
        optimizer.pt        optimizer state (``save_optimizer=True``)
        state.pt            trainer state, batch-source position, RNG states (plain data + tensors)
        trainer_state.json  the same trainer state, human-readable
    latest.json             {"last_checkpoint": "step_000010", "step": 10}

A checkpoint is written into a hidden temporary directory and renamed into place, so every
``step_*`` directory is complete: after a kill at any moment, the newest ``step_*`` loads. Everything
is read back with ``torch.load(weights_only=True)`` (no pickled code), so batch-source states and RNG
states are stored as plain data.

Under FSDP2, full state dicts are gathered with ``torch.distributed.checkpoint.state_dict`` (every rank
joins), rank 0 writes, and loading broadcasts from rank 0.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from ludic_core.errors import ConfigError, DataError
from ludic_core.logs import get_logger
from ludic_train.weights import is_fsdp_module

if TYPE_CHECKING:
    import torch

__all__ = [
    "CheckpointConfig",
    "CheckpointManager",
    "LoadedCheckpoint",
    "RNGState",
    "StatefulBatchSource",
    "capture_rng_states",
    "restore_rng_states",
]

log = get_logger(__name__)

_STEP_DIR = re.compile(r"^step_(\d+)$")
RNGState = Any  # random.Random | numpy.random.Generator | torch.Generator


@runtime_checkable
class StatefulBatchSource(Protocol):
    """A batch source that can report and restore its position (plain data: dicts, lists, numbers,
    strings, tensors)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def _check_int(name: str, minimum: int) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"CheckpointConfig.{name} must be an int >= {minimum}, got {value!r}")

    return check


@attrs.frozen
class CheckpointConfig:
    """``every_n_steps=0`` saves only when asked; ``max_to_keep`` newest checkpoints are kept.

    ``weights="trainable"`` stores only parameters with ``requires_grad`` (e.g. LoRA adapters): small,
    and correct as long as the resumed model is built from the same frozen base.
    """

    output_dir: Path = attrs.field(converter=Path)
    every_n_steps: int = attrs.field(default=0, validator=_check_int("every_n_steps", 0))
    max_to_keep: int = attrs.field(default=2, validator=_check_int("max_to_keep", 1))
    save_optimizer: bool = True
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
        if _rank() == 0:
            cfg.output_dir.mkdir(parents=True, exist_ok=True)
            # Leftovers of a save that was killed half-way; never loadable, safe to remove.
            for stale in cfg.output_dir.glob(".tmp-step_*"):
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

    def latest(self) -> Path | None:
        found = self.checkpoints()
        return found[-1][1] if found else None

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

    def maybe_save(self, step: int, **kwargs: Any) -> Path | None:
        return self.save(step, **kwargs) if self.should_save(step) else None

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
        if _rank() != 0:
            _barrier()
            return None
        state: dict[str, Any] = {
            "step": step,
            "time": time.time(),
            "trainer": dict(trainer_state or {}),
            "weights": self.cfg.weights,
            "rng": capture_rng_states(rngs),
        }
        if isinstance(batch_source, StatefulBatchSource):
            state["batch_source"] = batch_source.state_dict()

        final = self.cfg.output_dir / f"step_{step:06d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step_{step:06d}-", dir=self.cfg.output_dir))
        try:
            _save_file(model_state, tmp / "model.pt")
            if optim_state is not None:
                _save_file(optim_state, tmp / "optimizer.pt")
            # state.pt marks the directory complete; write it last.
            _save_file(state, tmp / "state.pt")
            readable = {"step": step, "time": state["time"], "weights": self.cfg.weights, **state["trainer"]}
            (tmp / "trainer_state.json").write_text(
                json.dumps(readable, indent=2, default=str), encoding="utf-8"
            )
            _fsync_dir(tmp)
            if final.exists():  # re-saving a step (e.g. after a resume): swap, never leave a gap
                trash = self.cfg.output_dir / f".tmp-step_{step:06d}-old-{os.getpid()}"
                os.rename(final, trash)
                os.rename(tmp, final)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(self.cfg.output_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _write_json_atomic(self.cfg.output_dir / "latest.json", {"last_checkpoint": final.name, "step": step})
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
        found = self.checkpoints()
        for _step, path in found[: max(0, len(found) - self.cfg.max_to_keep)]:
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
        import torch

        path = self.resolve(target)
        state = torch.load(path / "state.pt", weights_only=True, map_location="cpu")
        model_state = torch.load(path / "model.pt", weights_only=True, map_location="cpu")
        self._load_model(model, model_state, trainable_only=state.get("weights") == "trainable", path=path)
        if optimizer is not None:
            optim_path = path / "optimizer.pt"
            if not optim_path.is_file():
                raise DataError(f"{path} has no optimizer state (saved with save_optimizer=False)")
            optim_state = torch.load(optim_path, weights_only=True, map_location="cpu")
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
            batch_source.load_state_dict(state["batch_source"])
        restore_rng_states(state["rng"], rngs)
        log.info("checkpoint.loaded", step=state["step"], path=str(path))
        return LoadedCheckpoint(
            path=path, step=int(state["step"]), trainer_state=dict(state.get("trainer", {}))
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
