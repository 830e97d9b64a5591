"""Token-budget micro-batching: split a macro-batch so each forward pass stays under a token budget.

Items are truncated to ``max_seq_len`` (recorded in their meta, never silently), sorted by length and
packed greedily so that ``longest_item_in_chunk × items_in_chunk ≤ micro_token_budget`` — the padded
size of the chunk, i.e. what the forward pass actually costs. An item longer than the budget forms a
micro-batch of its own: the budget bounds memory wherever an item allows it, and no item is dropped. Sorting by length keeps similar lengths
together, so little of the budget is spent on padding (``bench/bench_microbatch_padding.py``).

With ``group_prompts`` (the trainer's ``share_prompt_prefix``), items that share their whole prompt
(the replies of one GRPO group at one turn) are packed together, with other groups whose prompts are
as long: the forward pass runs each distinct prompt once (:mod:`ludic_train.policy_forward`), so a
chunk costs each prompt once plus every row's reply, ``prompts × prompt length + rows × (longest −
prompt length) ≤ micro_token_budget``. A group of 8 replies to a 160-token prompt then runs about 230
tokens instead of 1,300. Items whose prompt no other item shares are packed by length as above.

Every Ludic loss is a mean over the sequences of its micro-batch, so multiplying each micro-batch's
loss by :func:`micro_loss_scale` (``micro_items / total_items``) before ``backward`` accumulates exactly
the gradient of the whole macro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch
from torch import Tensor

from ludic_core.errors import ConfigError
from ludic_core.saw import SAWItem
from ludic_core.validation import check_int
from ludic_train.collate import collate_saw_items
from ludic_train.policy_forward import MIN_SHARED_PREFIX

__all__ = [
    "MicroBatch",
    "collate_micro_batches",
    "micro_loss_scale",
    "split_items_by_token_budget",
    "truncate_item",
]


@attrs.frozen
class MicroBatch:
    """One forward pass worth of collated tensors.

    ``num_items`` sequences with ``num_tokens`` real (unpadded) tokens, after truncation;
    ``num_truncated`` of them were cut to ``max_seq_len``. ``padded_tokens`` is what the forward pass
    processes.
    """

    tensors: dict[str, Tensor]
    num_items: int
    num_tokens: int
    num_truncated: int = 0

    @property
    def padded_tokens(self) -> int:
        return int(self.tensors["input_ids"].numel())


def truncate_item(item: SAWItem, max_seq_len: int) -> SAWItem:
    """The item cut to its first ``max_seq_len`` tokens (itself if it fits), with the cut recorded in meta.

    Per-token logprobs keep the entries of the retained action tokens. Meta gains
    ``seq_len_truncated``, ``seq_len_original``, ``seq_len_retained``, ``seq_len_retained_frac``,
    ``truncated=True`` and, unless a reason is already set, ``truncation_reason="max_seq_len"``;
    ``completion_length`` and ``prompt_length`` are clipped to what was kept.
    """
    original = len(item)
    if original <= max_seq_len:
        return item
    action_mask = item.action_mask[:max_seq_len]
    kept_actions = sum(action_mask)
    meta = dict(item.meta)
    meta.update(
        seq_len_truncated=True,
        seq_len_original=original,
        seq_len_retained=max_seq_len,
        seq_len_retained_frac=max_seq_len / original,
        truncated=True,
    )
    if not meta.get("truncation_reason"):
        meta["truncation_reason"] = "max_seq_len"
    if "completion_length" in meta:
        meta["completion_length"] = kept_actions
    if "prompt_length" in meta:
        meta["prompt_length"] = max_seq_len - kept_actions
    return attrs.evolve(
        item,
        input_ids=item.input_ids[:max_seq_len],
        action_mask=action_mask,
        meta=meta,
        actor_logps=None if item.actor_logps is None else item.actor_logps[:kept_actions],
        teacher_logps=None if item.teacher_logps is None else item.teacher_logps[:kept_actions],
    )


def _check_budget(micro_token_budget: int, max_seq_len: int) -> None:
    check_int("micro_token_budget", micro_token_budget, 1)
    check_int("max_seq_len", max_seq_len, 1)


def split_items_by_token_budget(
    items: Sequence[SAWItem], *, micro_token_budget: int, max_seq_len: int, group_prompts: bool = False
) -> list[list[SAWItem]]:
    """Truncate, sort by length (ascending, stable) and pack greedily under the padded-token budget;
    with ``group_prompts``, items sharing a whole prompt go together first (see the module docstring).
    No item is dropped or repeated."""
    _check_budget(micro_token_budget, max_seq_len)
    truncated = [truncate_item(item, max_seq_len) for item in items]
    chunks: list[list[SAWItem]] = []
    if group_prompts:
        by_prompt: dict[tuple[int, ...], list[SAWItem]] = {}
        alone: list[SAWItem] = []
        for item in truncated:
            prompt = _shared_prompt(item)
            (by_prompt.setdefault(prompt, []) if prompt else alone).append(item)
        by_length: dict[int, list[list[SAWItem]]] = {}
        for prompt, same in by_prompt.items():
            if len(same) == 1:
                alone.extend(same)
            else:
                by_length.setdefault(len(prompt), []).append(sorted(same, key=len))
        for shared, groups in sorted(by_length.items()):
            chunks.extend(_pack_groups(groups, micro_token_budget, shared))
        truncated = alone
    # The plain packing is the same rule with nothing shared: each item a group of its own, padded to
    # the longest (ascending order: the newest item).
    chunks.extend(_pack_groups([[item] for item in sorted(truncated, key=len)], micro_token_budget, 0))
    return chunks


def _shared_prompt(item: SAWItem) -> tuple[int, ...]:
    """The tokens the forward pass can run once for every item with the same prompt: all before the
    last prompt token, whose logit predicts the first action token (empty when too short to share)."""
    first_action = item.action_mask.index(1) if 1 in item.action_mask else 0
    shared = first_action - 1
    return tuple(item.input_ids[:shared]) if shared >= MIN_SHARED_PREFIX else ()


def _pack_groups(groups: Sequence[Sequence[SAWItem]], budget: int, shared: int) -> list[list[SAWItem]]:
    """Greedy packing of groups of items (each sharing its first ``shared`` tokens), group after
    group; a chunk costs ``shared`` tokens per group in it plus each row's tokens after them, padded
    to the longest."""
    chunks: list[list[SAWItem]] = []
    current: list[SAWItem] = []
    prompts = longest = 0
    for group in groups:
        new_prompt = True
        for item in group:
            cost = (prompts + new_prompt) * shared + (len(current) + 1) * (max(longest, len(item)) - shared)
            if current and cost > budget:
                chunks.append(current)
                current, prompts, longest, new_prompt = [], 0, 0, True
            current.append(item)
            prompts += new_prompt
            longest = max(longest, len(item))
            new_prompt = False
    if current:
        chunks.append(current)
    return chunks


def collate_micro_batches(
    items: Sequence[SAWItem],
    *,
    pad_token_id: int,
    micro_token_budget: int,
    max_seq_len: int,
    device: torch.device | str | None = None,
    group_prompts: bool = False,
) -> list[MicroBatch]:
    """:func:`split_items_by_token_budget` then :func:`collate_saw_items` per chunk (``[]`` for no items)."""
    chunks = split_items_by_token_budget(
        items, micro_token_budget=micro_token_budget, max_seq_len=max_seq_len, group_prompts=group_prompts
    )
    return [
        MicroBatch(
            tensors=collate_saw_items(chunk, pad_token_id=pad_token_id, device=device),
            num_items=len(chunk),
            num_tokens=sum(len(item) for item in chunk),
            num_truncated=sum(1 for item in chunk if item.meta.get("seq_len_truncated")),
        )
        for chunk in chunks
    ]


def micro_loss_scale(micro_items: int, total_items: int) -> float:
    """The factor for a micro-batch's loss so the summed micro-batch gradients equal the macro-batch's.

    Losses are means over their sequences, so a micro-batch of ``m`` items out of ``N`` contributes
    ``m / N`` of the macro-batch mean. (Under data parallelism pass the global item count and let the
    gradient all-reduce *sum*, or the per-rank count with an averaging all-reduce when ranks hold equal
    counts.)
    """
    check_int("micro_items", micro_items, 1)
    check_int("total_items", total_items, 1)
    if micro_items > total_items:
        raise ConfigError(f"micro_items ({micro_items}) cannot exceed total_items ({total_items})")
    return micro_items / total_items
