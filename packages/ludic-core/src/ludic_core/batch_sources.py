"""Batch sources: where a trainer gets SAW batches (the :class:`~ludic_core.saw.BatchSource` contract).

* :class:`RolloutBatchSource` — online and synchronous: each ``next_batch`` asks a requests provider
  for this step's requests, runs them through the engine and returns the batch (the trainer waits).
* :class:`OfflineBatchSource` — a fixed set of items (from JSONL rollout logs, SAW JSONL files, or
  memory), served in seeded-shuffled epochs with a resumable position. Pure Python, no torch.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ludic_core.credit import CreditAssigner
from ludic_core.curriculum import RequestsProvider
from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError, DataError
from ludic_core.filters import SampleFilter, apply_filter
from ludic_core.logs import get_logger
from ludic_core.rollout_log import read_rollouts
from ludic_core.rollout_settings import RolloutSettings
from ludic_core.saw import SAWBatch, SAWItem
from ludic_core.saw_io import read_saw_jsonl
from ludic_core.seeding import derive_seed
from ludic_core.trainable import credited_items
from ludic_core.validation import check_int

__all__ = ["OfflineBatchSource", "RolloutBatchSource"]

log = get_logger(__name__)

PathLike = str | os.PathLike[str]


class RolloutBatchSource:
    """Online batches: ``requests(step)`` → :meth:`RolloutEngine.generate_batch` with ``settings``.

    The step counter starts at ``start_step`` and advances by one per batch; ``state_dict`` holds it
    with the engine's seed counter, so a resumed run asks for the same requests and seeds.
    """

    def __init__(
        self,
        *,
        engine: RolloutEngine,
        credit_assigner: CreditAssigner,
        requests: RequestsProvider,
        settings: RolloutSettings,
        sample_filter: SampleFilter | None = None,
        start_step: int = 0,
    ) -> None:
        self.settings = RolloutSettings.coerce(settings, owner="RolloutBatchSource.settings")
        check_int("RolloutBatchSource.start_step", start_step, 0)
        if not callable(requests):
            raise ConfigError(
                f"RolloutBatchSource.requests must be callable (step -> requests), got {requests!r}"
            )
        self.engine = engine
        self.credit_assigner = credit_assigner
        self.requests = requests
        self.sample_filter = sample_filter
        self.step = start_step

    async def next_batch(self) -> SAWBatch:
        requests = list(self.requests(self.step))
        if not requests:
            raise ConfigError(f"the requests provider returned no requests for step {self.step}")
        batch = await self.engine.generate_batch(
            requests,
            self.settings,
            credit_assigner=self.credit_assigner,
            sample_filter=self.sample_filter,
        )
        batch.meta["step"] = self.step
        self.step += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The step, the engine's seed counters and, when the requests provider keeps state of its own
        (a GRPO strategy's RNG, a dataset stream's position), that state too, so a resumed run asks
        for exactly the requests the interrupted one would have."""
        state: dict[str, Any] = {"step": self.step, "engine": self.engine.state_dict()}
        provider_state = getattr(self.requests, "state_dict", None)
        if callable(provider_state):
            state["requests"] = provider_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_int("state step", state.get("step"), 0)
        load_provider = getattr(self.requests, "load_state_dict", None)
        if "requests" in state and not callable(load_provider):
            raise ConfigError(
                "state has the requests provider's state, but this source's requests provider "
                f"{self.requests!r} has no load_state_dict; resume with the same kind of provider"
            )
        self.engine.load_state_dict(state["engine"])
        if "requests" in state and callable(load_provider):
            load_provider(state["requests"])
        self.step = int(state["step"])


class OfflineBatchSource:
    """Serve a fixed list of items in epochs.

    Each epoch visits the items in an order shuffled by ``random.Random(derive_seed(seed, epoch))`` (or
    in file order with ``shuffle=False``); with ``world_size > 1`` rank ``r`` takes positions
    ``r, r + world_size, ...`` of that order, after trimming it to a multiple of ``world_size`` so every
    rank sees the same number of batches. ``drop_last`` drops an epoch's short final batch; otherwise
    it is served and the next batch starts the next epoch. ``state_dict`` (epoch, position) resumes
    exactly where a run stopped.
    """

    def __init__(
        self,
        items: Iterable[SAWItem],
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        sample_filter: SampleFilter | None = None,
        rank: int = 0,
        world_size: int = 1,
        source: str = "offline",
    ) -> None:
        check_int("OfflineBatchSource.batch_size", batch_size, 1)
        check_int("OfflineBatchSource.seed", seed, 0)
        check_int("OfflineBatchSource.world_size", world_size, 1)
        check_int("OfflineBatchSource.rank", rank, 0)
        if rank >= world_size:
            raise ConfigError(f"OfflineBatchSource.rank must be < world_size={world_size}, got {rank}")
        all_items = list(items)
        self.items, self.num_filtered = apply_filter(all_items, sample_filter)
        per_rank = len(self.items) // world_size
        if per_rank == 0:
            raise DataError(
                f"OfflineBatchSource has {len(self.items)} items after filtering ({self.num_filtered} filtered out of "
                f"{len(all_items)}); need at least world_size={world_size}"
            )
        if drop_last and per_rank < batch_size:
            raise DataError(
                f"OfflineBatchSource: {per_rank} items per rank is fewer than batch_size={batch_size} with drop_last=True"
            )
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.source = source
        self.epoch = 0
        self.position = 0
        self._order_epoch = -1
        self._order: list[int] = []

    # -- constructors ------------------------------------------------------------------------------

    @classmethod
    def from_rollout_logs(
        cls,
        paths: PathLike | Sequence[PathLike],
        *,
        credit_assigner: CreditAssigner,
        **kwargs: Any,
    ) -> OfflineBatchSource:
        """Items built from JSONL rollout logs exactly as online: credit over all rollouts, one item per
        turn. Failed and unbuildable rollouts (and the rest of their GRPO groups) are skipped and
        counted."""
        rollouts = [r for p in _paths(paths) for r in read_rollouts(p)]
        credited = credited_items(rollouts, credit_assigner)
        if credited.num_failed or credited.num_dropped_incomplete_groups or credited.unbuildable:
            log.info(
                "offline_batch_source.skipped_rollouts",
                failed=credited.num_failed,
                unbuildable=len(credited.unbuildable),
                incomplete_groups=credited.num_dropped_incomplete_groups,
            )
        return cls(credited.items, source="offline_rollouts", **kwargs)

    @classmethod
    def from_saw_files(cls, paths: PathLike | Sequence[PathLike], **kwargs: Any) -> OfflineBatchSource:
        """Items read from SAW JSONL files (see :mod:`ludic_core.saw_io`), weights as stored."""
        items = [item for p in _paths(paths) for item in read_saw_jsonl(p)]
        return cls(items, source="offline_saw", **kwargs)

    # -- iteration ---------------------------------------------------------------------------------

    @property
    def items_per_epoch(self) -> int:
        """Items this rank sees per epoch."""
        return len(self.items) // self.world_size

    @property
    def num_batches_per_epoch(self) -> int:
        n = self.items_per_epoch
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __len__(self) -> int:
        return self.items_per_epoch

    def _epoch_order(self) -> list[int]:
        if self._order_epoch != self.epoch:
            order = list(range(len(self.items)))
            if self.shuffle:
                random.Random(derive_seed(self.seed, "offline_epoch", self.epoch)).shuffle(order)
            order = order[: self.items_per_epoch * self.world_size]
            self._order = order[self.rank :: self.world_size]
            self._order_epoch = self.epoch
        return self._order

    def next_batch_sync(self) -> SAWBatch:
        order = self._epoch_order()
        remaining = len(order) - self.position
        if remaining <= 0 or (self.drop_last and remaining < self.batch_size):
            self.epoch += 1
            self.position = 0
            order = self._epoch_order()
        epoch, start = self.epoch, self.position
        indices = order[start : start + self.batch_size]
        self.position = start + len(indices)
        items = [self.items[i] for i in indices]
        n = len(items)
        meta: dict[str, Any] = {
            "source": self.source,
            "epoch": epoch,
            "position": start,
            "num_samples": n,
            "avg_completion_length": sum(i.meta.get("completion_length", i.num_action_tokens) for i in items)
            / n,
            "avg_prompt_length": sum(i.meta.get("prompt_length", len(i) - i.num_action_tokens) for i in items)
            / n,
        }
        return SAWBatch(items=items, meta=meta)

    async def next_batch(self) -> SAWBatch:
        return self.next_batch_sync()

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_items": len(self.items),
        }

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if state.get("seed") != self.seed or state.get("num_items") != len(self.items):
            raise ConfigError(
                f"state is for seed={state.get('seed')!r}, num_items={state.get('num_items')!r}; this source has "
                f"seed={self.seed}, num_items={len(self.items)}"
            )
        check_int("state epoch", state.get("epoch"), 0)
        check_int("state position", state.get("position"), 0)
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])


def _paths(paths: PathLike | Sequence[PathLike]) -> list[PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    out = list(paths)
    if not out:
        raise ConfigError("no paths given")
    return out
