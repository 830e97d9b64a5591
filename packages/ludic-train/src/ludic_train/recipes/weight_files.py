"""Weights handed from a pipeline learner to its actors through a shared directory.

The learner's Trainer publishes through :class:`DirectoryWeights` (a
:class:`~ludic_core.publisher.PolicyPublisher`: ``publish(tensors, version=step)``): each version goes to
``weights-<version>.pt`` and is then announced, atomically, in ``latest.json``. An actor calls
:meth:`DirectoryWeights.apply_latest` between batches (``RedisPipelineActor(before_batch=...)``), when no
generation is in flight, so no batch is sampled from half-updated weights. One machine or a shared file
system; across machines without one, use ludic-vllm's publishers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ludic_core.errors import DataError
from ludic_core.logs import get_logger
from ludic_train.local_client import LocalPolicyClient

__all__ = ["DirectoryWeights", "load_weights"]

log = get_logger("ludic.recipes.weights")


def load_weights(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Copy Hugging Face-named tensors into ``model``; a name the model lacks, or a missing weight other
    than a tied output head, is an error (a learner on another architecture)."""
    result = model.load_state_dict(dict(tensors), strict=False)
    if result.unexpected_keys:
        raise DataError(f"published weights hold names the actor's model lacks: {result.unexpected_keys[:5]}")
    tied = (
        {"lm_head.weight"} if getattr(getattr(model, "config", None), "tie_word_embeddings", False) else set()
    )
    missing = set(result.missing_keys) - tied
    if missing:
        raise DataError(f"published weights lack {sorted(missing)[:5]}")


class DirectoryWeights:
    """``weights-<version>.pt`` files plus an atomically replaced ``latest.json`` in ``directory``; the
    newest ``keep`` files stay."""

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
        files = sorted(self.directory.glob("weights-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
        for old in files[: -self.keep]:
            old.unlink(missing_ok=True)

    async def aclose(self) -> None:
        return None

    async def apply_latest(self, model: torch.nn.Module, client: LocalPolicyClient) -> None:
        """Load the announced version into ``model`` if it is newer than what ``client`` samples with."""
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
        log.info("pipeline.weights_applied", version=version)
