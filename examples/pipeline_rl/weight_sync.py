"""Moving the learner's weights to the actor's sampler, for the pipeline example.

Both classes are :class:`ludic_core.publisher.PolicyPublisher`s for the learner's ``Trainer`` (it calls
``publish(tensors, version=step)``) and give the actor an ``apply_latest(model, client)`` to call
between batches (``RedisPipelineActor(before_batch=...)``), when no generation is in flight, so a batch
is never sampled from half-updated weights:

* :class:`InMemoryWeights` — actor and learner in one process (``--local``): a one-slot mailbox.
* :class:`DirectoryWeights` — separate processes on one machine or a shared file system (the
  ``pipeline-actor`` / ``pipeline-learner`` recipes' hand-over, :mod:`ludic_train.recipes.weight_files`).

With vLLM the publisher would be ``ludic_vllm``'s (NCCL/Gloo) and the server would report the version;
nothing else in the example changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch

from ludic_train.local_client import LocalPolicyClient
from ludic_train.recipes.weight_files import DirectoryWeights, load_weights

__all__ = ["DirectoryWeights", "InMemoryWeights", "load_weights"]

log = logging.getLogger("pipeline_rl.weights")


class InMemoryWeights:
    """One-slot mailbox: the newest published version replaces an unapplied older one."""

    def __init__(self) -> None:
        self._pending: tuple[int, Mapping[str, torch.Tensor]] | None = None
        self.applied: list[int] = []

    async def publish(self, named_tensors: Mapping[str, torch.Tensor], *, version: int) -> None:
        # merged_state_dict hands over detached copies, so the learner's next step cannot alter them.
        self._pending = (version, named_tensors)

    async def aclose(self) -> None:
        self._pending = None

    async def apply_latest(self, model: torch.nn.Module, client: LocalPolicyClient) -> None:
        if self._pending is None:
            return
        (version, tensors), self._pending = self._pending, None
        with torch.no_grad():
            load_weights(model, tensors)
        client.set_policy_version(version)
        self.applied.append(version)
        log.info("weights_applied version=%d", version)
