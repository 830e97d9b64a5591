"""SAW items → padded tensors for one forward pass.

Right padding to the longest item. Per-token logprobs carried by the items (``actor_logps`` from the
sampler, ``teacher_logps`` for distillation) have one entry per action token; they are scattered onto
the action positions of a ``[B, T]`` tensor with 0 elsewhere, so they line up with ``input_ids``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ludic_core.errors import DataError
from ludic_core.saw import SAWItem

__all__ = ["PER_TOKEN_FIELDS", "collate_saw_items"]

PER_TOKEN_FIELDS = ("actor_logps", "teacher_logps")
"""Optional per-action-token fields of :class:`SAWItem`, collated to ``[B, T]`` tensors."""


def _check_first_token_is_context(items: Sequence[SAWItem]) -> None:
    bad = [i for i, item in enumerate(items) if item.action_mask[0]]
    if bad:
        raise DataError(
            f"items {bad} have action_mask[0] == 1: the first token has no context to be predicted from, "
            "so it cannot be a trained action (every sequence must start with at least one prompt token)"
        )


def _scatter_per_token(items: Sequence[SAWItem], field: str, length: int) -> Tensor | None:
    present = [getattr(item, field) is not None for item in items]
    if not any(present):
        return None
    if not all(present):
        missing = [i for i, has in enumerate(present) if not has]
        raise DataError(
            f"{field} must be present on every item of a batch or on none; items {missing} of {len(items)} lack it"
        )
    rows = []
    for item in items:
        values = iter(getattr(item, field))
        row = [next(values) if is_action else 0.0 for is_action in item.action_mask]
        rows.append(row + [0.0] * (length - len(row)))
    return torch.tensor(rows, dtype=torch.float32)


def collate_saw_items(
    items: Sequence[SAWItem], *, pad_token_id: int, device: torch.device | str | None = None
) -> dict[str, Tensor]:
    """Collate items into ``input_ids``/``attention_mask`` ``[B,T]`` long, ``action_mask`` ``[B,T]``
    float, ``weight`` ``[B]`` float, and when the items carry them ``actor_logps`` ``[B,T]`` with
    ``old_logp_action`` ``[B]`` (their per-item sum) and ``teacher_logps`` ``[B,T]``.
    """
    if not items:
        raise DataError("collate_saw_items needs at least one item; got an empty list")
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int) or pad_token_id < 0:
        raise DataError(f"pad_token_id must be a non-negative int, got {pad_token_id!r}")
    _check_first_token_is_context(items)
    length = max(len(item) for item in items)

    def padded(values: Sequence[int], fill: int) -> list[int]:
        return list(values) + [fill] * (length - len(values))

    batch: dict[str, Tensor] = {
        "input_ids": torch.tensor([padded(i.input_ids, pad_token_id) for i in items], dtype=torch.long),
        "attention_mask": torch.tensor([padded(i.attention_mask, 0) for i in items], dtype=torch.long),
        "action_mask": torch.tensor([padded(i.action_mask, 0) for i in items], dtype=torch.float32),
        "weight": torch.tensor([i.weight for i in items], dtype=torch.float32),
    }
    for field in PER_TOKEN_FIELDS:
        per_token = _scatter_per_token(items, field, length)
        if per_token is not None:
            batch[field] = per_token
    if "actor_logps" in batch:
        batch["old_logp_action"] = batch["actor_logps"].sum(dim=1)
    if device is not None:
        batch = {key: value.to(device) for key, value in batch.items()}
    return batch
