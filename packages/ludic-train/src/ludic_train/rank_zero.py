"""Rank 0 does something alone; every rank of the process group learns how it went.

Used where one rank acts for all (writing the run directory, sending the weights to an inference
server): the other ranks must not run on as if it had worked, nor wait in their next collective until
the process group's timeout when it failed.
"""

from __future__ import annotations

from typing import Any

from ludic_core.errors import ConfigError, LudicError

__all__ = ["share_rank_zero_outcome"]


def share_rank_zero_outcome(failure: Exception | None, what: str, value: Any = None) -> Any:
    """Broadcast rank 0's ``value``, or its ``failure``, to every rank (one broadcast; every rank must
    call this). Rank 0 re-raises its own error; the other ranks raise one quoting it (a
    :class:`ConfigError` for a ConfigError, else a :class:`LudicError`). Returns rank 0's ``value``."""
    import torch.distributed as dist

    outcome = ("ok", value) if failure is None else ("error", f"{type(failure).__name__}: {failure}")
    box: list[Any] = [outcome]
    dist.broadcast_object_list(box, src=0)
    if failure is not None:
        raise failure
    status, payload = box[0]
    if status == "error":
        error = ConfigError if payload.startswith("ConfigError") else LudicError
        raise error(f"rank 0 failed {what}: {payload}")
    return payload
