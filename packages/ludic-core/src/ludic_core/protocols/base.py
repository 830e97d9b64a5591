"""The interaction-protocol contract: the explicit agent–env loop, outside both."""

from __future__ import annotations

import abc
from typing import Any

import attrs

from ludic_core.data_fields import is_strict_int, slot_setters
from ludic_core.env import LudicEnv
from ludic_core.errors import ConfigError
from ludic_core.inference import InferenceSpec
from ludic_core.types import Rollout

__all__ = ["EpisodeRun", "InteractionProtocol"]


@attrs.frozen
class EpisodeRun:
    """What one :meth:`InteractionProtocol.run` plays: the env, the turn limit, the seeds, how to
    sample, and the bound on each model call."""

    env: LudicEnv[Any]
    max_steps: int
    env_seed: int | None = None
    sampling_seed: int | None = None
    inference: InferenceSpec | None = None
    timeout_s: float | None = None

    @classmethod
    def _of(
        cls,
        env: LudicEnv[Any],
        max_steps: int,
        env_seed: int | None,
        sampling_seed: int | None,
        inference: InferenceSpec | None,
        timeout_s: float | None,
    ) -> EpisodeRun:
        """The value ``__init__`` builds (its fields have no converters or checks), set through the
        slots' own setters (see :func:`~ludic_core.data_fields.slot_setters`): once per episode."""
        run = object.__new__(cls)
        set_env, set_max_steps, set_env_seed, set_sampling_seed, set_inference, set_timeout_s = _RUN_SLOTS
        set_env(run, env)
        set_max_steps(run, max_steps)
        set_env_seed(run, env_seed)
        set_sampling_seed(run, sampling_seed)
        set_inference(run, inference)
        set_timeout_s(run, timeout_s)
        return run


_RUN_SLOTS = slot_setters(EpisodeRun)


class InteractionProtocol(abc.ABC):
    """Runs one episode and returns one :class:`Rollout` per agent perspective.

    A protocol instance serves one episode (the rollout engine builds a fresh one per episode).
    ``run`` never raises for a failure inside the env, the agent or the client: it returns the
    rollouts collected so far with :attr:`Rollout.failure` set. ``timeout_s`` bounds each model call.
    A protocol implements :meth:`play`; ``run`` checks the arguments and hands them over as one value.
    """

    async def run(
        self,
        *,
        env: LudicEnv[Any],
        max_steps: int,
        env_seed: int | None = None,
        sampling_seed: int | None = None,
        inference: InferenceSpec | None = None,
        timeout_s: float | None = None,
    ) -> list[Rollout]:
        if not is_strict_int(max_steps) or max_steps < 1:
            raise ConfigError(f"max_steps must be an int >= 1, got {max_steps!r}")
        return await self.play(EpisodeRun._of(env, max_steps, env_seed, sampling_seed, inference, timeout_s))

    @abc.abstractmethod
    async def play(self, episode: EpisodeRun) -> list[Rollout]:
        """Play ``episode`` (its ``max_steps`` already checked); the contract of :meth:`run`."""
