"""Small SAW items and actor batches for the pipeline tests (wire format, actor, learner source)."""

from __future__ import annotations

from typing import Any

from ludic_core.pipeline import BatchMessage
from ludic_core.saw import SAWItem


def make_item(i: int, *, version: int | None = 0, rollout: str | None = None) -> SAWItem:
    """Four tokens, two of them actions. The logprobs are exact in float32 (the wire's logprob type);
    the weight is not, and the wire keeps it exact (float64)."""
    meta: dict[str, Any] = {"rollout_id": rollout or f"r{i}", "total_reward": float(i % 2)}
    if version is not None:
        meta["policy_version"] = version
    return SAWItem(
        input_ids=[5, 6, 7 + i, 8],
        action_mask=[0, 0, 1, 1],
        weight=0.1 * i - 0.3333333333333333,
        meta=meta,
        actor_logps=[-0.5, -1.25 - i / 8],
        sampling_temperature=0.7 if i % 2 else None,
    )


def message(n_items: int = 3, *, version: int = 0, batch_index: int = 0) -> BatchMessage:
    return BatchMessage(
        items=tuple(make_item(i, version=version) for i in range(n_items)),
        actor_id="test-actor",
        batch_index=batch_index,
        created_at=1_700_000_000.25,
        meta={"num_failed_episodes": 0},
    )
