"""SAW items → padded tensors for one forward pass.

Right padding to the longest item. Per-token logprobs carried by the items (``actor_logps`` from the
sampler, ``teacher_logps`` for distillation) have one entry per action token; they are scattered onto
the action positions of a ``[B, T]`` tensor with 0 elsewhere, so they line up with ``input_ids``.

Two more entries tell the loss what to score: ``temperature`` (each item's
:func:`logprob_temperature`, the temperature its behaviour logprobs were computed under; the loss divides
that row's logits by it) and ``logit_positions`` (the positions whose logits the loss reads, so a trainer
can have the model compute only those; see :class:`~ludic_train.losses.base.TokenLogpContext`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ludic_core.errors import DataError
from ludic_core.saw import SAWItem

__all__ = ["PER_TOKEN_FIELDS", "collate_saw_items", "logit_positions", "logprob_temperature"]

PER_TOKEN_FIELDS = ("actor_logps", "teacher_logps")
"""Optional per-action-token fields of :class:`SAWItem`, collated to ``[B, T]`` tensors."""


def logprob_temperature(item: SAWItem) -> float:
    """The temperature ``item``'s behaviour logprobs were computed under: its ``sampling_temperature``,
    or 1.0 when it has none (unknown) or it is 0 (greedy decoding, whose logprobs clients return
    untempered)."""
    temperature = item.sampling_temperature
    return 1.0 if temperature is None or temperature == 0.0 else temperature


def logit_positions(items: Sequence[SAWItem]) -> list[int]:
    """Sorted positions ``t`` at which some item's next token ``t + 1`` is an action token: the only
    logits any loss reads (logits at ``t`` score token ``t + 1``)."""
    positions: set[int] = set()
    for item in items:
        mask = item.action_mask
        positions.update(t - 1 for t in range(1, len(mask)) if mask[t])
    return sorted(positions)


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
    float, ``weight`` ``[B]`` float, ``temperature`` ``[B]`` float (:func:`logprob_temperature`: 1.0
    for items without a sampling temperature and for greedy ones), ``logit_positions`` ``[K]`` long
    (:func:`logit_positions`), and when the items carry them ``actor_logps`` ``[B,T]`` with
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
        # Items hold real tokens only, so the mask is ones over each item's length, zeros over padding.
        "attention_mask": torch.tensor([padded([1] * len(i), 0) for i in items], dtype=torch.long),
        "action_mask": torch.tensor([padded(i.action_mask, 0) for i in items], dtype=torch.float32),
        "weight": torch.tensor([i.weight for i in items], dtype=torch.float32),
        "temperature": torch.tensor([logprob_temperature(i) for i in items], dtype=torch.float32),
        # Computed here from the host-side masks, so selecting the positions costs no device sync.
        "logit_positions": torch.tensor(logit_positions(items), dtype=torch.long),
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
