"""JSON Lines plumbing shared by rollout logs and SAW files: one object per line, errors with a place."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ludic_core.errors import DataError

__all__ = ["loads_object", "read_jsonl"]

T = TypeVar("T")


def loads_object(line: str, what: str) -> dict[str, Any]:
    """Parse one JSON line that must hold an object (``what`` names it in errors)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid {what} JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DataError(f"a {what} JSON line must be an object, got {type(data).__name__}")
    return data


def read_jsonl(path: str | os.PathLike[str], parse: Callable[[str], T]) -> Iterator[T]:
    """Yield ``parse(line)`` for every non-blank line in file order; a bad line raises naming ``file:line``."""
    path = Path(path)
    with path.open("r", encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield parse(line)
            except DataError as exc:
                raise DataError(f"{path}:{number}: {exc}") from exc
