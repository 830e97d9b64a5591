"""How a run's memory cap holds for the whole run (RLIMIT_AS alone caps each process, so a program
that forks N children would get N times the cap).

* ``"cgroup"`` — a cgroup v2 group per run with ``memory.max`` (``ludic_envs.codeexec.cgroups``): the
  kernel charges every process of the run together and OOM-kills inside the group at the cap.
* ``"aggregate"`` — the watchdog sums the memory of the run's processes every tick (resident set
  sizes, and where those exceed the cap, proportional set sizes, so pages shared after ``fork`` count
  once) and kills the run when the sum passes the cap. It samples, so a run may briefly overshoot.

The methods are tried in order as the network ones are; ``IsolationReport.memory_method`` records
which one held. Either way a run that passes the cap ends with ``limit == "memory"``, and every
process keeps its own RLIMIT_AS (so a single-process bomb still sees ``MemoryError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias, get_args

import attrs

from ludic_core.validation import check_some_of
from ludic_envs.codeexec.cgroups import (
    CgroupBase,
    CgroupUnavailable,
    create_run_group,
    oom_kills,
    prepare_cgroup_base,
    remove_run_group,
    run_group_name,
)
from ludic_envs.codeexec.procscan import proportional_bytes, resident_bytes

__all__ = [
    "DEFAULT_MEMORY_METHODS",
    "MemoryMethod",
    "MemoryPolicy",
    "RunMemoryCap",
    "check_memory_methods",
]

MemoryMethod: TypeAlias = Literal["cgroup", "aggregate"]
DEFAULT_MEMORY_METHODS: tuple[MemoryMethod, ...] = ("cgroup", "aggregate")


def check_memory_methods(methods: Sequence[MemoryMethod]) -> tuple[MemoryMethod, ...]:
    """``methods`` as a tuple, or a ConfigError naming the bad value."""
    return check_some_of("memory_methods", methods, get_args(MemoryMethod))


@attrs.frozen
class MemoryPolicy:
    """What a pool settled once, at its start: the cgroup parent its runs use (if the methods try
    ``"cgroup"`` first and the host has one), and why not, where not."""

    methods: tuple[MemoryMethod, ...]
    cgroup_base: CgroupBase | None = None
    cgroup_note: str | None = None

    @classmethod
    def for_host(cls, methods: Sequence[MemoryMethod]) -> MemoryPolicy:
        checked = check_memory_methods(methods)
        if checked[0] != "cgroup":  # "aggregate" first always holds: nothing after it is tried
            return cls(methods=checked)
        try:
            return cls(methods=checked, cgroup_base=prepare_cgroup_base())
        except CgroupUnavailable as exc:
            return cls(methods=checked, cgroup_note=f"no cgroup memory cap: {exc}")

    def open(self, memory_bytes: int, max_processes: int, token: str) -> RunMemoryCap:
        """The cap of one run: its own group when the policy has a parent and the group can be made,
        else the aggregate watchdog if allowed, else none (each process's RLIMIT_AS only)."""
        cap = RunMemoryCap(memory_bytes, aggregate_allowed="aggregate" in self.methods)
        if self.cgroup_base is None:
            cap.fall_back(self.cgroup_note)
            return cap
        try:
            cap.group = create_run_group(self.cgroup_base, run_group_name(token), memory_bytes, max_processes)
            cap.method = "cgroup"
        except OSError as exc:
            cap.fall_back(f"no cgroup memory cap: {exc.strerror or exc}")
        return cap


class RunMemoryCap:
    """The memory cap of one run as it stands: ``method`` is the one in force (None: per process
    RLIMIT_AS only), ``group`` the run's cgroup while it exists, ``notes`` why a method was given up."""

    def __init__(self, memory_bytes: int, *, aggregate_allowed: bool) -> None:
        self.memory_bytes = memory_bytes
        self.aggregate_allowed = aggregate_allowed
        self.group: str | None = None
        self.method: MemoryMethod | None = None
        self.notes: list[str] = []

    def fall_back(self, note: str | None) -> None:
        """Give up the cgroup (there is none, or the launcher could not join it): the aggregate
        watchdog takes over where the methods allow it. ``note`` says why."""
        if note is not None:
            self.notes.append(note)
        self.method = "aggregate" if self.aggregate_allowed else None

    def exceeded(self, pids: list[int]) -> bool:
        """Did the run pass its cap? ``pids`` are its live processes (the launcher excluded)."""
        if self.method == "cgroup":
            return self.group is not None and oom_kills(self.group) > 0
        if self.method == "aggregate":
            # Resident sizes are cheap but count a page shared after fork once per process; only
            # when their sum is over the cap are the proportional sizes read to confirm it.
            return resident_bytes(pids) > self.memory_bytes and proportional_bytes(pids) > self.memory_bytes
        return False

    async def release(self, timeout_s: float) -> None:
        """Remove the run's group (after its processes are gone); a failure becomes a note."""
        if self.group is None:
            return
        error = await remove_run_group(self.group, timeout_s)
        if error is not None:
            self.notes.append(error)
        self.group = None
