"""check_agent and check_publisher pass conforming implementations and name what a broken one breaks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ludic_core.errors import ConformanceError
from ludic_core.testing import ScriptedAgent, SeededChatClient, check_agent, check_publisher
from ludic_core.types import Info

CLIENT = SeededChatClient(["A1", "B2", "C3"])


async def test_a_conforming_agent_passes() -> None:
    await check_agent(lambda: ScriptedAgent(CLIENT), observations=["Board: empty", "You: A1. Now?", "Go."])


class DeafAgent(ScriptedAgent):
    """Drops every observation after the first: the model never sees the env's answers."""

    def on_after_step(self, obs: str, info: Info) -> None:
        return None


SHARED: list[Any] = []


class SharedDialogAgent(ScriptedAgent):
    """Keeps its dialog in a list every instance shares (a classic mutable-default bug)."""

    def reset(self, *, system_prompt: str | None = None) -> None:
        self.messages = SHARED
        SHARED.clear()
        if system_prompt:
            SHARED.append({"role": "system", "content": system_prompt})

    def on_env_reset(self, obs: str, info: Info) -> None:
        SHARED.append({"role": "user", "content": obs})


async def test_an_agent_that_loses_observations_is_named() -> None:
    with pytest.raises(
        ConformanceError,
        match="turn 1: a different observation fed with on_after_step left the next prompt unchanged",
    ):
        await check_agent(lambda: DeafAgent(CLIENT))


async def test_a_factory_that_returns_one_agent_is_refused() -> None:
    agent = ScriptedAgent(CLIENT)
    with pytest.raises(ConformanceError, match="returned the same object twice"):
        await check_agent(lambda: agent)


async def test_agents_sharing_state_are_named() -> None:
    with pytest.raises(ConformanceError, match="state is shared between agents"):
        await check_agent(lambda: SharedDialogAgent(CLIENT), observations=["first"])


class VersionBoard:
    """A publisher whose runtime's version is what it was last told (the in-process shape)."""

    shares_trainer_weights = True

    def __init__(self, *, broken: bool = False) -> None:
        self.version = 0
        self.broken = broken
        self.closed = 0

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        assert named_tensors == {}, "a publisher that shares the trainer's weights gets an empty mapping"
        if not self.broken:
            self.version = version

    async def aclose(self) -> None:
        self.closed += 1

    async def get_policy_version(self) -> int:
        return self.version

    async def complete_tokens(self, request: Any) -> Any:  # a VersionedClient is a ChatClient too
        raise AssertionError("not called")


async def test_a_conforming_publisher_passes_and_is_closed() -> None:
    board = VersionBoard()
    await check_publisher(board, named_tensors={"w": [1.0]}, versions=(1, 2, 5), version_source=board)
    assert board.version == 5 and board.closed == 2


async def test_a_publisher_whose_runtime_never_moves_is_named() -> None:
    board = VersionBoard(broken=True)
    with pytest.raises(ConformanceError, match="after publish\\(version=1\\) the runtime serves version 0"):
        await check_publisher(board, named_tensors={}, version_source=board)


async def test_versions_must_increase() -> None:
    with pytest.raises(ConformanceError, match="versions must be increasing"):
        await check_publisher(VersionBoard(), named_tensors={}, versions=(2, 1))
