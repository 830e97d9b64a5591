"""Moving the learner's weights to the actor's sampler, for the pipeline example.

Both classes are :class:`ludic_core.publisher.PolicyPublisher`s for the learner's ``Trainer`` (it calls
``publish(tensors, version=step)``) and give the actor an ``apply_latest(model, client)`` to call
between batches (``RedisPipelineActor(before_batch=...)``), when no generation is in flight, so a batch
is never sampled from half-updated weights:

* :class:`InMemoryWeights` — actor and learner in one process (``--local``): a one-slot mailbox.
* :class:`DirectoryWeights` — separate processes on one machine or a shared file system: each version
  is written to ``weights-<version>.pt`` and announced, atomically, in ``latest.json``.

With vLLM the publisher would be ``ludic_vllm``'s (NCCL/Gloo) and the server would report the version;
nothing else in the example changes.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ludic_train.local_client import LocalPolicyClient

log = logging.getLogger("pipeline_rl.weights")


def load_weights(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy HF-named tensors into ``model``; unknown names are an error, tied weights may be absent."""
    result = model.load_state_dict(dict(tensors), strict=False)
    if result.unexpected_keys:
        raise RuntimeError(
            f"published weights hold names the actor model lacks: {result.unexpected_keys[:5]}"
        )
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = set(result.missing_keys) - tied
    if missing:
        raise RuntimeError(f"published weights lack {sorted(missing)[:5]}")


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


class DirectoryWeights:
    """``weights-<version>.pt`` files plus an atomically replaced ``latest.json`` in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 2) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.applied: list[int] = []

    @property
    def _latest(self) -> Path:
        return self.directory / "latest.json"

    async def publish(self, named_tensors: Mapping[str, torch.Tensor], *, version: int) -> None:
        path = self.directory / f"weights-{version}.pt"
        tmp = path.with_suffix(".pt.tmp")
        torch.save(dict(named_tensors), tmp)
        os.replace(tmp, path)
        tmp_latest = self._latest.with_suffix(".json.tmp")
        tmp_latest.write_text(json.dumps({"version": version, "file": path.name}))
        os.replace(tmp_latest, self._latest)
        # Old files go once a newer one is announced (an actor still reading one keeps its open handle).
        for old in sorted(self.directory.glob("weights-*.pt"), key=lambda p: int(p.stem.split("-")[1]))[
            : -self.keep
        ]:
            old.unlink(missing_ok=True)

    async def aclose(self) -> None:
        return None

    def latest_version(self) -> int | None:
        try:
            return int(json.loads(self._latest.read_text())["version"])
        except FileNotFoundError:
            return None

    async def apply_latest(self, model: torch.nn.Module, client: LocalPolicyClient) -> None:
        if not self._latest.exists():
            return
        info: dict[str, Any] = json.loads(self._latest.read_text())
        version = int(info["version"])
        if version <= client.policy_version:
            return
        tensors = torch.load(self.directory / info["file"], map_location="cpu", weights_only=True)
        with torch.no_grad():
            load_weights(model, tensors)
        client.set_policy_version(version)
        self.applied.append(version)
        log.info("weights_applied version=%d directory=%s", version, self.directory)
