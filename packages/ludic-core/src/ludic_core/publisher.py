"""The weight-publishing contract between a trainer and an inference runtime.

The trainer calls :meth:`PolicyPublisher.publish` every ``publish_every`` steps with the full weights
(LoRA adapters merged, Hugging Face parameter names) and ``version = trainer step``; the runtime
tags what it samples afterwards with that version, which is what ``max_lag`` staleness control reads.
Implementations: ``ludic_vllm`` (NCCL / Gloo / file transports), ``ludic_tinker``, and
``ludic_train.local_client.SharedWeightsPublisher`` for the in-process client. The contract lives here,
torch-free, so that a backend can implement it without depending on the trainer; the tensors are
whatever the trainer holds (``torch.Tensor`` for ludic-train's ``Trainer``).

A publisher whose runtime already shares the trainer's parameter objects sets the class attribute
``shares_trainer_weights = True``; the trainer then skips gathering and merging and passes an empty
mapping (only the version moves).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["PolicyPublisher"]


@runtime_checkable
class PolicyPublisher(Protocol):
    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None: ...

    async def aclose(self) -> None: ...
