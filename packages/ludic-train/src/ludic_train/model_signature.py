"""What a causal LM's forward accepts, read from its signature (once per model and keyword)."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

__all__ = ["forward_takes"]

_KNOWN: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()


def forward_takes(model: Any, name: str) -> bool:
    """Whether the causal LM's forward names the keyword ``name`` explicitly (a forward that only
    swallows ``**kwargs`` may ignore it). A PEFT wrapper passes keywords through to the model it wraps,
    so that model is asked."""
    try:
        known = _KNOWN.setdefault(model, {})
    except TypeError:  # not weak-referenceable: inspect every time
        known = {}
    if name not in known:
        get_base = getattr(model, "get_base_model", None)
        target = get_base() if callable(get_base) else model
        try:
            known[name] = name in inspect.signature(target.forward).parameters
        except (AttributeError, TypeError, ValueError):
            known[name] = False
    return known[name]
