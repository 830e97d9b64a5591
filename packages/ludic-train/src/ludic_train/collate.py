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

import sys
from array import array
from collections.abc import Sequence

import torch
from torch import Tensor

from ludic_core.errors import DataError
from ludic_core.packed_saw import PackedArrays, packed_arrays
from ludic_core.saw import SAWItem
from ludic_core.validation import check_int

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
    return _positions_predicting_actions(_action_masks(items, [len(item) for item in items])).tolist()


# Each array of an item becomes a tensor through one buffer, never through a Python object per token
# (``torch.tensor`` of a tuple of 1k ints costs ~25x ``torch.frombuffer`` of the same ids). A packed
# item (:mod:`ludic_core.packed_saw`: built by the SAW builder or decoded from the pipeline) hands over
# the buffers it holds; an item of tuples is packed into an ``array`` first, in C.
_UNSIGNED = {"B": torch.uint8, "H": torch.uint16, "I": torch.uint32, "L": torch.uint32}
_FLOATS = {"f": torch.float32, "d": torch.float64}


def _native(struct_format: str) -> bool:
    return struct_format[0] == "=" or (struct_format[0] == "<" and sys.byteorder == "little")


def _from_bytes(data: bytes | memoryview, dtype: torch.dtype) -> Tensor:
    # A writable copy (a few kB): torch.frombuffer warns on read-only buffers such as bytes.
    return torch.frombuffer(bytearray(data), dtype=dtype)


def _packed(item: SAWItem) -> PackedArrays | None:
    packed = packed_arrays(item)
    return (
        packed if packed is not None and _native(packed.id_format) and _native(packed.logp_format) else None
    )


def _ids_row(item: SAWItem) -> Tensor:
    packed = _packed(item)
    if packed is not None and packed.id_format[1] in _UNSIGNED:
        return _from_bytes(packed.id_bytes(), _UNSIGNED[packed.id_format[1]]).long()
    return torch.frombuffer(array("q", item.input_ids), dtype=torch.long)


def _mask_row(item: SAWItem, row: Tensor) -> None:
    """Set ``row`` (bool, the item's length) to the item's action mask."""
    packed = _packed(item)
    if packed is None:
        row.copy_(torch.frombuffer(bytearray(item.action_mask), dtype=torch.uint8))  # 0/1 by SAWItem's checks
        return
    start = 0
    for position, run in enumerate(packed.mask_runs):
        if position & 1:
            row[start : start + run] = True
        start += run


def _logps_row(item: SAWItem, field: str) -> Tensor:
    packed = _packed(item)
    if packed is not None and field in packed.logps and packed.logp_format[1] in _FLOATS:
        if packed.logps[field][2] == 0:
            return torch.zeros(0, dtype=torch.float32)
        return _from_bytes(packed.logp_bytes(field), _FLOATS[packed.logp_format[1]]).float()
    values = getattr(item, field)
    return (
        torch.frombuffer(array("d", values), dtype=torch.float64).float()
        if values
        else torch.zeros(0, dtype=torch.float32)
    )


def _action_masks(items: Sequence[SAWItem], lengths: Sequence[int]) -> Tensor:
    """``[B, T]`` bool: each item's action mask, False over padding."""
    masks = torch.zeros((len(items), max(lengths, default=0)), dtype=torch.bool)
    for row, item in enumerate(items):
        _mask_row(item, masks[row, : lengths[row]])
    return masks


def _positions_predicting_actions(masks: Tensor) -> Tensor:
    return masks[:, 1:].any(dim=0).nonzero().flatten()


def _check_first_token_is_context(masks: Tensor) -> None:
    bad = masks[:, 0].nonzero().flatten().tolist() if masks.shape[1] else []
    if bad:
        raise DataError(
            f"items {bad} have action_mask[0] == 1: the first token has no context to be predicted from, "
            "so it cannot be a trained action (every sequence must start with at least one prompt token)"
        )


def _scatter_per_token(
    items: Sequence[SAWItem], field: str, masks: Tensor, lengths: Sequence[int]
) -> Tensor | None:
    present = [getattr(item, field) is not None for item in items]
    if not any(present):
        return None
    if not all(present):
        missing = [i for i, has in enumerate(present) if not has]
        raise DataError(
            f"{field} must be present on every item of a batch or on none; items {missing} of {len(items)} lack it"
        )
    out = torch.zeros(masks.shape, dtype=torch.float32)
    for row, item in enumerate(items):
        # A SAWItem holds one value per action token (its validators check it): they fill the row's
        # action positions in order.
        out[row, : lengths[row]][masks[row, : lengths[row]]] = _logps_row(item, field)
    return out


def collate_saw_items(
    items: Sequence[SAWItem], *, pad_token_id: int, device: torch.device | str | None = None
) -> dict[str, Tensor]:
    """Collate items into ``input_ids``/``attention_mask`` ``[B,T]`` long, ``action_mask`` ``[B,T]``
    float, ``weight`` ``[B]`` float, ``temperature`` ``[B]`` float (:func:`logprob_temperature`: 1.0
    for items without a sampling temperature and for greedy ones), ``logit_positions`` ``[K]`` long
    (:func:`logit_positions`), and when the items carry them ``actor_logps`` ``[B,T]`` with
    ``old_logp_action`` ``[B]`` (their per-item sum) and ``teacher_logps`` ``[B,T]``.

    Each array of each item becomes a tensor through one buffer (a packed item's own), and the
    padding, the action positions and the per-token scatter are tensor operations: no Python step per
    token.
    """
    if not items:
        raise DataError("collate_saw_items needs at least one item; got an empty list")
    check_int("pad_token_id", pad_token_id, 0, error=DataError)
    lengths = [len(item) for item in items]
    masks = _action_masks(items, lengths)
    _check_first_token_is_context(masks)
    input_ids = torch.full(masks.shape, pad_token_id, dtype=torch.long)
    for row, item in enumerate(items):
        input_ids[row, : lengths[row]] = _ids_row(item)
    batch: dict[str, Tensor] = {
        "input_ids": input_ids,
        # Items hold real tokens only, so the mask is ones over each item's length, zeros over padding.
        "attention_mask": (
            torch.arange(masks.shape[1]).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        ).long(),
        "action_mask": masks.float(),
        "weight": torch.tensor([i.weight for i in items], dtype=torch.float32),
        "temperature": torch.tensor([logprob_temperature(i) for i in items], dtype=torch.float32),
        # Computed here from the host-side masks, so selecting the positions costs no device sync.
        "logit_positions": _positions_predicting_actions(masks),
    }
    for field in PER_TOKEN_FIELDS:
        per_token = _scatter_per_token(items, field, masks, lengths)
        if per_token is not None:
            batch[field] = per_token
    if "actor_logps" in batch:
        batch["old_logp_action"] = batch["actor_logps"].sum(dim=1)
    if device is not None:
        batch = {key: value.to(device) for key, value in batch.items()}
    return batch
