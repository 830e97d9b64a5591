"""A KV cache whose layers grow in place, for the local sampler's decode loop.

transformers' ``DynamicCache`` appends each step's keys and values with ``torch.cat``, which copies
the layer's whole cache at every generated token. For the CPU demo's decode steps (25 rows of 300
tokens, SmolLM2-135M's 30 layers) that is about 350 MB of copies and fresh allocations per token,
which took a sixth to a third of a step on 2 CPU cores. :class:`GrowingLayer` keeps each layer in a
buffer with room to spare and writes new positions into it; attention gets views of the filled part,
the same numbers in the same layout, so outputs are bit-identical (``tests/test_growing_kv_cache.py``).
The sampler reserves room for the tokens a batch may still generate, so its decode loop never
reallocates; a fuller buffer is replaced by a larger one (at least :data:`MIN_SPARE` more positions).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_SPARE", "growing_kv_cache"]

MIN_SPARE = 16
"""The fewest spare positions a (re)allocated layer buffer gets."""


def growing_kv_cache(config: Any, *, reserve: int = 0) -> Any | None:
    """A transformers ``DynamicCache`` for a model of ``config`` whose full-attention layers grow in
    place (other layer kinds, such as sliding windows, stay as transformers makes them); ``None`` when
    this transformers has no per-layer cache classes. Each (re)allocation of a layer's buffers leaves
    ``reserve`` positions to spare (at least :data:`MIN_SPARE`): the tokens still to be generated."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return None
    layer_class = functools.partial(_growing_layer_class(), spare=max(reserve, MIN_SPARE))
    cache = DynamicCache(config=config)
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        # The cache only calls it to make each layer, so a partial can stand in for the class.
        cache.layer_class_to_replicate = layer_class  # type: ignore[assignment]
    cache.layers = [layer_class() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


_LAYER_CLASS: type | None = None


def _growing_layer_class() -> type:
    """:class:`GrowingLayer`, defined on first use so that importing this module needs no transformers."""
    global _LAYER_CLASS
    if _LAYER_CLASS is None:
        from transformers.cache_utils import DynamicLayer

        class GrowingLayer(DynamicLayer):
            """A ``DynamicLayer`` whose ``keys``/``values`` are views of buffers with spare positions.

            Base-class methods that replace ``keys``/``values`` (crop, repeat, reorder, offload) keep
            working: the next update sees that ``keys`` is no longer its view and copies what is there
            into a fresh buffer.
            """

            _buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            _key_view: torch.Tensor | None = None  # the filled part of the key buffer, as handed out

            def __init__(self, *, spare: int = MIN_SPARE) -> None:
                super().__init__()
                self.spare = spare

            def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
                super().lazy_initialization(key_states, value_states)
                self._buffers, self._key_view = None, None

            def update(
                self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
            ) -> tuple[torch.Tensor, torch.Tensor]:
                if not self.is_initialized:
                    self.lazy_initialization(key_states, value_states)
                keys, values = self.keys, self.values
                if self._buffers is None or keys is not self._key_view:
                    assert keys is not None and values is not None
                    held = keys.shape[-2] if keys.numel() else 0
                    self._reallocate((keys, values), held, held + key_states.shape[-2], like=key_states)
                assert self._buffers is not None and self._key_view is not None
                start = self._key_view.shape[-2]
                end = start + key_states.shape[-2]
                if end > self._buffers[0].shape[-2]:
                    self._reallocate(self._buffers, start, end, like=key_states)
                key_buffer, value_buffer = self._buffers
                key_buffer[..., start:end, :].copy_(key_states)
                value_buffer[..., start:end, :].copy_(value_states)
                return self._set_filled(end)

            def batch_select_indices(self, indices: torch.Tensor) -> None:
                view = self._key_view
                if self._buffers is not None and view is not None and self.keys is view and view.shape[-2]:
                    self._buffers = (
                        self._buffers[0].index_select(0, indices),
                        self._buffers[1].index_select(0, indices),
                    )
                    self._set_filled(view.shape[-2])
                else:
                    super().batch_select_indices(indices)

            def _reallocate(
                self, old: tuple[torch.Tensor, torch.Tensor], held: int, needed: int, *, like: torch.Tensor
            ) -> None:
                """New buffers for ``needed`` positions and spare room, holding the first ``held``
                positions of ``old`` (keys, values)."""
                shape = list(like.shape)
                shape[-2] = needed + self.spare
                buffers = (like.new_empty(shape), like.new_empty(shape))
                if held:
                    for buffer, tensor in zip(buffers, old, strict=True):
                        buffer[..., :held, :].copy_(tensor[..., :held, :])
                self._buffers = buffers
                self._set_filled(held)

            def _set_filled(self, filled: int) -> tuple[torch.Tensor, torch.Tensor]:
                assert self._buffers is not None
                keys, values = self._buffers[0][..., :filled, :], self._buffers[1][..., :filled, :]
                self.keys, self.values, self._key_view = keys, values, keys
                return keys, values

        _LAYER_CLASS = GrowingLayer
    return _LAYER_CLASS
