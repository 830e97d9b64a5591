"""Checks that keep one bad number from reaching the optimiser.

:func:`check_items` runs on every SAW item where it enters the :class:`~ludic_train.trainer.Trainer`
(before the staleness filter and the algorithm's preprocess). Items arrive from queues, files and
other processes, so a constructed ``SAWItem`` is not proof of sane values: a weight of ``1e300`` is
finite, a token id can exceed the model's vocabulary, and values can be forced past attrs' validators.
Bad items are *dropped and counted* (``train/invalid_items_dropped``) with a warning that names the
item, the field and the value, the same way stale items are dropped and counted: one corrupt item in
a queue should cost that item, not the run. A batch left empty is refilled as usual, and
``TrainerConfig.max_refills`` empty batches in a row still raise.

The checks use builtins over the item's tuples (``min``/``max``/``sum`` run at C speed), so they cost
far less than collating the same tokens; the slow per-value scan runs only on an item that fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ludic_core.saw import LOGP_TOLERANCE, SAWItem

__all__ = ["check_items", "item_label", "item_problem", "model_vocab_size"]


def model_vocab_size(model: Any) -> int | None:
    """The number of rows of the model's input embedding (what a token id indexes), else
    ``config.vocab_size``; ``None`` when the model exposes neither (the id check is then skipped)."""
    get_embeddings = getattr(model, "get_input_embeddings", None)
    if callable(get_embeddings):
        try:
            embeddings = get_embeddings()
        except (AttributeError, NotImplementedError):
            embeddings = None
        rows = getattr(embeddings, "num_embeddings", None)
        if isinstance(rows, int) and rows > 0:
            return rows
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def item_label(item: SAWItem, index: int) -> str:
    """How an item is named in errors and warnings: its ids from ``meta`` where it has them (an
    ``item_id``, else the ``rollout_id`` and turn), always with its position in the batch."""
    meta = item.meta if isinstance(item.meta, dict) else {}
    parts = [f"{key}={meta[key]!r}" for key in ("item_id", "rollout_id", "turn_index") if key in meta]
    return f"item {index} ({', '.join(parts)})" if parts else f"item {index}"


def _first_bad(values: Sequence[float], bad: Any) -> tuple[int, float]:
    return next((i, v) for i, v in enumerate(values) if bad(v))


def _check_logps(name: str, values: Sequence[float]) -> str | None:
    if not values:
        return None
    # A NaN or an infinity makes the sum non-finite (so does an overflow, itself out of range); only
    # then is the per-value scan needed. With every value finite, max() is reliable.
    if not math.isfinite(sum(values)):
        i, v = _first_bad(values, lambda x: not math.isfinite(x))
        return f"{name}[{i}] = {v!r} is not finite"
    if max(values) > LOGP_TOLERANCE:
        i, v = _first_bad(values, lambda x: x > LOGP_TOLERANCE)
        return f"{name}[{i}] = {v!r} is > 0 (a logprob is <= 0)"
    return None


def item_problem(item: SAWItem, vocab_size: int | None) -> str | None:
    """The first thing wrong with ``item`` (field and value), or ``None``."""
    n = len(item.input_ids)
    if n == 0:
        return "input_ids is empty"
    if len(item.action_mask) != n:
        return f"action_mask has length {len(item.action_mask)} but input_ids has {n}"
    if not math.isfinite(item.weight):
        return f"weight = {item.weight!r} is not finite"
    low, high = min(item.input_ids), max(item.input_ids)
    if low < 0:
        return f"input_ids holds {low}, a negative token id"
    if vocab_size is not None and high >= vocab_size:
        i = item.input_ids.index(high)
        return f"input_ids[{i}] = {high} is outside the model's vocabulary (size {vocab_size})"
    n_actions = sum(item.action_mask)
    for name in ("actor_logps", "teacher_logps"):
        logps = getattr(item, name)
        if logps is None:
            continue
        if len(logps) != n_actions:
            return f"{name} has {len(logps)} entries but action_mask has {n_actions} ones"
        problem = _check_logps(name, logps)
        if problem is not None:
            return problem
    return None


def check_items(items: Sequence[SAWItem], *, vocab_size: int | None) -> tuple[list[SAWItem], list[str]]:
    """``(valid items, one message per rejected item)``; each message names the item, field and value."""
    kept: list[SAWItem] = []
    rejected: list[str] = []
    for index, item in enumerate(items):
        problem = item_problem(item, vocab_size)
        if problem is None:
            kept.append(item)
        else:
            rejected.append(f"{item_label(item, index)}: {problem}")
    return kept, rejected
