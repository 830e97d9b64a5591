"""Offline supervised fine-tuning through the same :class:`~ludic_train.trainer.Trainer`.

Data comes from rollout logs (one rollout per line; ``min_reward`` keeps rollouts whose
``total_reward`` reaches it; one item per turn, credit 1.0) or SAW JSONL
(``ludic_core.saw_io.write_saw_jsonl``, weights as stored). Rollouts from a message-level client carry no
token ids: pass ``chat_template=`` the student's template and their turns are re-tokenised
(:mod:`ludic_core.retokenize`); without it they are refused, naming this fix. SFT is the ``sft()``
preset on an :class:`~ludic_core.batch_sources.OfflineBatchSource`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from ludic_core.batch_sources import OfflineBatchSource
from ludic_core.credit import ConstantCredit
from ludic_core.errors import ConfigError, DataError
from ludic_core.logs import get_logger
from ludic_core.retokenize import MessageTemplate
from ludic_core.rollout_log import read_rollouts
from ludic_core.saw import SAWItem
from ludic_core.saw_io import read_saw_jsonl
from ludic_core.trainable import credited_items, select_trainable_rollouts

__all__ = ["detect_jsonl_kind", "load_sft_items", "sft_batch_source"]

log = get_logger(__name__)

PathLike = str | os.PathLike[str]
JsonlKind = Literal["auto", "rollouts", "saw"]


def _as_paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    out = [Path(p) for p in paths]
    if not out:
        raise ConfigError("SFT needs at least one data file; got an empty list")
    return out


def detect_jsonl_kind(path: PathLike) -> Literal["rollouts", "saw"]:
    """``"saw"`` if the first record has ``input_ids``, ``"rollouts"`` if it has ``steps``."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}: the first line is not JSON ({exc})") from exc
                if isinstance(record, dict) and "input_ids" in record:
                    return "saw"
                if isinstance(record, dict) and "steps" in record:
                    return "rollouts"
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise DataError(f"{path}: neither a SAW item nor a rollout (first record keys: {keys})")
    raise DataError(f"{path} is empty")


def load_sft_items(
    paths: PathLike | Sequence[PathLike],
    *,
    kind: JsonlKind = "auto",
    min_reward: float | None = None,
    chat_template: MessageTemplate | None = None,
) -> list[SAWItem]:
    """SAW items for SFT from rollout logs or SAW files (``min_reward`` applies to rollouts only;
    ``chat_template`` re-tokenises message-level rollouts, see the module docstring).

    The items' ``sampling_temperature`` is dropped: SFT fits the model's own distribution,
    ``softmax(logits)``, to the data, whatever temperature the data was sampled at (a loss would
    otherwise score ``softmax(logits / τ)``, see :mod:`ludic_train.losses.base`).
    """
    items: list[SAWItem] = []
    for path in _as_paths(paths):
        file_kind = detect_jsonl_kind(path) if kind == "auto" else kind
        if file_kind == "saw":
            if min_reward is not None:
                raise ConfigError(
                    f"min_reward filters rollouts; {path} holds SAW items (filter them upstream)"
                )
            items.extend(read_saw_jsonl(path))
            continue
        if file_kind != "rollouts":
            raise ConfigError(f"kind must be 'auto', 'rollouts' or 'saw', got {kind!r}")
        rollouts = list(read_rollouts(path))
        kept, failed, _ = select_trainable_rollouts(rollouts)
        if min_reward is not None:
            kept = [r for r in kept if r.total_reward >= min_reward]
        credited = credited_items(kept, ConstantCredit(1.0), retokenize_with=chat_template)
        log.info(
            "sft.rollouts",
            path=str(path),
            total=len(rollouts),
            failed=failed,
            unbuildable=len(credited.unbuildable),
            kept=len(credited.rollouts),
            min_reward=min_reward,
        )
        items.extend(credited.items)
    if not items:
        raise DataError(f"no SFT items in {[str(p) for p in _as_paths(paths)]} (min_reward={min_reward})")
    return [
        item if item.sampling_temperature is None else attrs.evolve(item, sampling_temperature=None)
        for item in items
    ]


def sft_batch_source(
    paths: PathLike | Sequence[PathLike],
    *,
    batch_size: int,
    kind: JsonlKind = "auto",
    min_reward: float | None = None,
    chat_template: MessageTemplate | None = None,
    shuffle: bool = True,
    seed: int = 0,
    **kwargs: Any,
) -> OfflineBatchSource:
    """An :class:`OfflineBatchSource` over :func:`load_sft_items` (resumable: it has a ``state_dict``)."""
    items = load_sft_items(paths, kind=kind, min_reward=min_reward, chat_template=chat_template)
    return OfflineBatchSource(
        items, batch_size=batch_size, shuffle=shuffle, seed=seed, source="sft", **kwargs
    )
