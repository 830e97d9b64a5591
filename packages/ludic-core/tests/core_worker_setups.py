"""Picklable envs and engine builders for the worker-process tests: spawned workers import this module
by name (tests/ is on the path of every pytest process and of the processes it spawns)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator

from ludic_core.engine import RolloutEngine
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient
from ludic_core.types import StepOutcome

GUESSES = [str(n) for n in range(1, 10)]


def seeded_protocol() -> SingleAgentProtocol:
    """A fresh agent per episode over a client whose reply depends only on the request seed."""
    return SingleAgentProtocol(ScriptedAgent(SeededChatClient(GUESSES)))


class ExitingEnv(GuessNumberEnv):
    """Kills its process on the first step, as a segfaulting extension would."""

    def env_step(self, action: str) -> StepOutcome:
        os._exit(3)


class BlockingEnv(GuessNumberEnv):
    """A step that holds the event loop (no ``blocking_step``), so the worker's own timeouts cannot fire."""

    def env_step(self, action: str) -> StepOutcome:
        time.sleep(60)
        return super().env_step(action)


class SlowEnv(GuessNumberEnv):
    """A step that yields the loop but takes long: an episode still running when its call is cancelled."""

    blocking_step = True

    def env_step(self, action: str) -> StepOutcome:
        time.sleep(0.2)
        return super().env_step(action)


def bad_kwarg_env(**kwargs: object) -> GuessNumberEnv:
    return GuessNumberEnv(max_number=0)  # a ConfigError, raised in the worker


ENV_FACTORIES = {
    "guess": GuessNumberEnv,
    "exiting": ExitingEnv,
    "blocking": BlockingEnv,
    "slow": SlowEnv,
    "bad_kwarg": bad_kwarg_env,
}


def engine(base_seed: int = 0, deterministic_ids: bool = True) -> RolloutEngine:
    return RolloutEngine(
        env_factories=ENV_FACTORIES,
        protocol_factories={"seeded": seeded_protocol},
        base_seed=base_seed,
        deterministic_ids=deterministic_ids,
    )


STARTED_IN: list[int] = []


@contextlib.asynccontextmanager
async def engine_in_context(base_seed: int = 0) -> AsyncIterator[RolloutEngine]:
    """A worker engine with a resource to close, as a backend's client is."""
    yield engine(base_seed)
