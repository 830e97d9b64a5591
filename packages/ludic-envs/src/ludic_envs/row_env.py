"""Envs that ask one dataset row per episode: one fixed row, or a row picked from many."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError

__all__ = ["DatasetRowEnv"]


class DatasetRowEnv(SingleAgentEnv):
    """A single-agent env whose episode starts from one dataset row.

    The row is ``sample`` (one row), or comes from ``samples`` (any sequence of rows, e.g. a
    ``datasets.Dataset``): row ``index`` if given, else a row drawn with the env's RNG, which
    ``reset(seed=...)`` reseeds, so a seed picks the row reproducibly.
    """

    def __init__(
        self,
        sample: Mapping[str, Any] | None,
        samples: Sequence[Mapping[str, Any]] | None,
        index: int | None,
        *,
        system_prompt: str | None,
        seed: int | None,
        agent_id: str,
    ) -> None:
        super().__init__(agent_id=agent_id)
        owner = type(self).__name__
        if (sample is None) == (samples is None):
            raise ConfigError(f"{owner} needs exactly one of sample= (one row) or samples= (many rows)")
        if sample is not None and index is not None:
            raise ConfigError(f"index={index!r} only applies with samples=, not with a single sample=")
        if samples is not None:
            if len(samples) == 0:
                raise ConfigError(f"samples= is empty; {owner} needs at least one row")
            if index is not None and not 0 <= index < len(samples):
                raise ConfigError(f"index must be in [0, {len(samples)}), got {index!r}")
        self._fixed_sample = sample
        self._samples = samples
        self._index = index
        self._system_prompt = system_prompt
        self._rng = random.Random(seed)

    @property
    def num_samples(self) -> int | None:
        """How many rows the env draws from (row ``index`` picks one); None for a single ``sample``."""
        return None if self._samples is None else len(self._samples)

    @property
    def suggested_sysprompt(self) -> str | None:
        return self._system_prompt

    def pick_row(self, seed: int | None) -> tuple[Mapping[str, Any], int | None]:
        """The row of a new episode and its index (None for a fixed ``sample``); a seed reseeds first."""
        if seed is not None:
            self._rng = random.Random(seed)
        if self._fixed_sample is not None:
            return self._fixed_sample, None
        assert self._samples is not None
        index = self._index if self._index is not None else self._rng.randrange(len(self._samples))
        return self._samples[index], index
