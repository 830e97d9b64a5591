"""Weights & Biases logging (``pip install "ludic-core[wandb]"``).

The project defaults to ``$WANDB_PROJECT`` and then ``"Ludic"``. Set ``WANDB_MODE=offline`` to log to
local files only (what the tests do).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ludic_core.errors import missing_extra

__all__ = ["DEFAULT_PROJECT", "WandbLogger"]

DEFAULT_PROJECT = "Ludic"


class WandbLogger:
    def __init__(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        group: str | None = None,
        tags: Sequence[str] | None = None,
        notes: str | None = None,
        config: Mapping[str, Any] | None = None,
        dir: str | os.PathLike[str] | None = None,
        mode: str | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise missing_extra("ludic-core", "wandb", "wandb") from exc
        kwargs: dict[str, Any] = {
            "project": project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            "name": name,
            "group": group,
            "tags": list(tags) if tags else None,
            "notes": notes,
            "config": dict(config) if config else None,
            "dir": None if dir is None else str(dir),
            "mode": mode,
        }
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        kwargs.update(init_kwargs or {})
        self.run = wandb.init(**kwargs)

    def log(self, step: int, stats: Mapping[str, Any]) -> None:
        self.run.log(dict(stats), step=step)

    def close(self) -> None:
        self.run.finish()
