"""What a causal LM's forward accepts, read from its signature (once per model and keyword)."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

__all__ = ["accepts_logits_to_keep", "forward_takes", "unwrapped_model"]

_KNOWN: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()


def unwrapped_model(model: Any) -> Any:
    """The model a PEFT wrapper holds (``get_base_model()``), or ``model`` itself."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def forward_takes(model: Any, name: str) -> bool:
    """Whether the causal LM's forward names the keyword ``name`` explicitly (a forward that only
    swallows ``**kwargs`` may ignore it). A PEFT wrapper passes keywords through to the model it wraps,
    so that model is asked."""
    try:
        known = _KNOWN.setdefault(model, {})
    except TypeError:  # not weak-referenceable: inspect every time
        known = {}
    if name not in known:
        try:
            known[name] = name in inspect.signature(unwrapped_model(model).forward).parameters
        except (AttributeError, TypeError, ValueError):
            known[name] = False
    return known[name]


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` as a tensor of sequence positions (HF causal
    LMs do, directly or behind a PEFT adapter)."""
    get_base_model = getattr(model, "get_base_model", None)
    if callable(get_base_model):
        # A PEFT wrapper forwards **kwargs to the base model. Prompt-learning adapters prepend virtual
        # tokens, which would shift every position; the full logits then fail the loss's shape check.
        config = getattr(model, "active_peft_config", None)
        if config is None or getattr(config, "is_prompt_learning", True):
            return False
        base = get_base_model()
        return base is not model and forward_takes(base, "logits_to_keep")
    return forward_takes(model, "logits_to_keep")
