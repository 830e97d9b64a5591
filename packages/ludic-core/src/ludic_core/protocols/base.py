"""The interaction-protocol contract: the explicit agent–env loop, outside both."""

from __future__ import annotations

import abc
from typing import Any

from ludic_core.env import LudicEnv
from ludic_core.inference import InferenceSpec
from ludic_core.types import Rollout

__all__ = ["InteractionProtocol"]


class InteractionProtocol(abc.ABC):
    """Runs one episode and returns one :class:`Rollout` per agent perspective.

    A protocol instance serves one episode (the rollout engine builds a fresh one per episode).
    ``run`` never raises for a failure inside the env, the agent or the client: it returns the
    rollouts collected so far with :attr:`Rollout.failure` set. ``timeout_s`` bounds each model call.
    """

    @abc.abstractmethod
    async def run(
        self,
        *,
        env: LudicEnv[Any],
        max_steps: int,
        env_seed: int | None = None,
        sampling_seed: int | None = None,
        inference: InferenceSpec | None = None,
        timeout_s: float | None = None,
    ) -> list[Rollout]: ...
