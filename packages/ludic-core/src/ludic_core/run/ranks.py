"""This process's place in a ``torchrun`` launch (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); a plain run
is rank 0 of 1. Recipes split their work by it; a sampler publishes from the main rank only."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from ludic_core.errors import ConfigError

__all__ = ["Ranks", "launched_ranks"]


@attrs.frozen
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def launched_ranks(environ: Mapping[str, str] | None = None) -> Ranks:
    """The ranks ``torchrun`` set in ``environ`` (default: this process's environment)."""
    env = os.environ if environ is None else environ
    values: dict[str, int] = {}
    for name, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)):
        raw = env.get(name)
        try:
            values[name] = default if raw is None else int(raw)
        except ValueError:
            raise ConfigError(
                f"environment variable {name}={raw!r}: expected an int (torchrun sets it)"
            ) from None
    ranks = Ranks(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
    if ranks.world_size < 1 or not 0 <= ranks.rank < ranks.world_size or ranks.local_rank < 0:
        raise ConfigError(
            f"RANK={ranks.rank}, WORLD_SIZE={ranks.world_size}, LOCAL_RANK={ranks.local_rank}: expected "
            "0 <= RANK < WORLD_SIZE (set by torchrun)"
        )
    return ranks
