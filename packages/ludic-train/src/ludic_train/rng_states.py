"""The random generators' states, captured into a checkpoint and restored from it: the global torch
(CPU and CUDA), numpy and Python ones, plus every generator a caller owns by name. They are stored as
plain data (lists, not numpy arrays) so that ``torch.load(weights_only=True)`` reads them."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from ludic_core.errors import ConfigError, DataError

__all__ = ["RNGState", "capture_rng_states", "restore_rng_states"]

RNGState = Any  # random.Random | numpy.random.Generator | torch.Generator


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
