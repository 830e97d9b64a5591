"""Ids for steps, rollouts and turns: random uuid4 hex strings, or seeded ones for reproducible runs.

:func:`new_id` gives the hex of a uuid4 (32 characters) without building a ``UUID`` object;
:func:`seeded_ids` makes it deterministic within a context, which the rollout engine uses for
``deterministic_ids=True``.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["new_id", "seeded_ids"]

_ID_SOURCE: ContextVar[random.Random | None] = ContextVar("ludic_id_source", default=None)


# The version and variant bits of an RFC 4122 version-4 UUID, applied to 128 random bits.
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & (2**128 - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)

# Ids are drawn in blocks: one draw, mask and hex formatting of 64 ids at once, then a slice each, is
# half the cost of formatting each id on its own (three ids per env step).
_IDS_PER_DRAW = 64
_BLOCK_CLEAR = sum(_UUID4_CLEAR << (128 * i) for i in range(_IDS_PER_DRAW))
_BLOCK_SET = sum(_UUID4_SET << (128 * i) for i in range(_IDS_PER_DRAW))

# Ids must be unique, not secret: a generator seeded from the OS (256 bits) draws them without a
# system call per id. A forked child reseeds and drops the ids drawn before the fork, so parent and
# child never share one.
_PROCESS_IDS = random.Random(os.urandom(32))
_spare_ids: list[str] = []


def _reseed_after_fork() -> None:
    _PROCESS_IDS.seed(os.urandom(32))
    _spare_ids.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_after_fork)


# Where each id lies in a block's hex text; map() slices it in C rather than a loop per id.
_ID_SLICES = tuple(slice(i, i + 32) for i in range(0, 32 * _IDS_PER_DRAW, 32))


def _draw_ids() -> None:
    block = f"{(_PROCESS_IDS.getrandbits(128 * _IDS_PER_DRAW) & _BLOCK_CLEAR) | _BLOCK_SET:0{32 * _IDS_PER_DRAW}x}"
    _spare_ids.extend(map(block.__getitem__, _ID_SLICES))


def new_id() -> str:
    """A fresh id for steps, rollouts and turns: uuid4, or drawn from :func:`seeded_ids` when active."""
    rng = _ID_SOURCE.get()
    if rng is None:
        # The hex of uuid.uuid4(), without building a UUID object. list.pop is atomic, so threads
        # never take the same id; one that finds the list empty draws a block.
        while True:
            try:
                return _spare_ids.pop()
            except IndexError:
                _draw_ids()
    return f"{rng.getrandbits(128):032x}"


@contextlib.contextmanager
def seeded_ids(seed: int) -> Iterator[None]:
    """Make :func:`new_id` deterministic in this context (and the asyncio tasks it starts).

    The rollout engine uses it with ``deterministic_ids=True`` so that a rerun with the same seeds
    reproduces rollouts and SAW items down to their ids. Ids are then unique within a run, not across
    runs that share seeds.
    """
    token = _ID_SOURCE.set(random.Random(seed))
    try:
        yield
    finally:
        _ID_SOURCE.reset(token)
