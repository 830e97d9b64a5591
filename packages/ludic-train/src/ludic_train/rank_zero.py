"""Rank 0 acting for every rank of the process group: which rank this process is, rank 0 gathering
what each rank holds, and every rank learning how something rank 0 did alone went.

Where one rank acts for all (writing the run directory or a checkpoint, sending the weights to an
inference server), the other ranks must not run on as if it had worked, nor wait in their next
collective until the process group's timeout when it failed.
"""

from __future__ import annotations

from typing import Any

from ludic_core.errors import ConfigError, LudicError

__all__ = ["barrier", "gather_on_rank_zero", "rank", "share_rank_zero_outcome", "world_size"]


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


def rank() -> int:
    """This process's rank in the process group (0 outside one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    """Wait for every rank (nothing outside a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def world_size() -> int:
    """The ranks in the process group (1 outside one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_on_rank_zero(value: Any) -> list[Any] | None:
    """Every rank's ``value``, in rank order, on rank 0 (None elsewhere); ``[value]`` in one process."""
    if world_size() == 1:
        return [value]
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * world_size() if rank() == 0 else None
    dist.gather_object(value, gathered, dst=0)
    return gathered
