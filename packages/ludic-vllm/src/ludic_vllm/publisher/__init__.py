"""Trainer-side weight publishers. Each implements ludic-train's ``PolicyPublisher`` contract
structurally: ``async publish(named_tensors, *, version)`` and ``async aclose()``.

* :class:`GlooPublisher` / :class:`NcclPublisher` — broadcast over a collective (CPU / GPU).
* :class:`FilePublisher` — safetensors on a shared path or uploaded over HTTP; also LoRA adapters.
* :class:`Rank0OnlyPublisher` — publish from rank 0 only (FSDP, DDP).
* :class:`PublishSettings` — what every publisher shares (token, timeout, pause mode, LoRA policy, run id).

Needs the ``publisher`` extra (torch, safetensors); imported lazily.
"""

from ludic_vllm.publisher.base import PublishSettings
from ludic_vllm.publisher.broadcast import BroadcastPublisher, GlooPublisher, NcclPublisher
from ludic_vllm.publisher.files import FilePublisher
from ludic_vllm.publisher.rank0 import Rank0OnlyPublisher

__all__ = [
    "BroadcastPublisher",
    "FilePublisher",
    "GlooPublisher",
    "NcclPublisher",
    "PublishSettings",
    "Rank0OnlyPublisher",
]
