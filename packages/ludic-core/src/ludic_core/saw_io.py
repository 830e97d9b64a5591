"""SAW items as JSON lines: one :meth:`SAWItem.to_dict` object per line.

The dicts hold only lists, numbers, strings, booleans and None (with ``schema_version``), so the same
payload also goes through msgpack unchanged; ``SAWItem.from_dict(json.loads(line)) == item`` exactly
(floats round-trip through ``repr``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ludic_core.errors import DataError
from ludic_core.jsonl import loads_object, read_jsonl
from ludic_core.saw import SAWItem

__all__ = ["read_saw_jsonl", "saw_item_from_json", "saw_item_to_json", "write_saw_jsonl"]


def saw_item_to_json(item: SAWItem) -> str:
    """One line of JSON; raises :class:`DataError` if ``meta`` is not JSON."""
    try:
        return json.dumps(item.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"SAWItem (rollout {item.meta.get('rollout_id')!r}) is not JSON-serialisable: {exc}"
        ) from exc


def saw_item_from_json(line: str) -> SAWItem:
    return SAWItem.from_dict(loads_object(line, "SAWItem"))


def write_saw_jsonl(path: str | os.PathLike[str], items: Iterable[SAWItem], *, append: bool = False) -> int:
    """Write (or append) items; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(saw_item_to_json(item) + "\n")
            count += 1
    return count


def read_saw_jsonl(path: str | os.PathLike[str]) -> Iterator[SAWItem]:
    """Yield the items of a SAW JSONL file; a bad line raises naming ``file:line``."""
    return read_jsonl(path, saw_item_from_json)
