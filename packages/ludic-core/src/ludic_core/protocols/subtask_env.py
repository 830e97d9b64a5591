"""The default env of a delegated subtask: show the task, take the sub-agent's first answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError
from ludic_core.types import Info, StepOutcome

__all__ = ["SubtaskEnv"]


class SubtaskEnv(SingleAgentEnv):
    """One step: the observation is the task text, the first parsed action is the answer.

    It has no reward of its own (0, terminated): a delegated subtask is judged by the outcome of the
    agent that delegated it (see :class:`~ludic_core.protocols.DelegatingProtocol`'s ``child_reward``).
    Built from a delegate call's arguments with :meth:`from_arguments`.
    """

    def __init__(self, task: str, *, agent_id: str = "agent_0") -> None:
        super().__init__(agent_id=agent_id)
        if not isinstance(task, str) or not task.strip():
            raise ConfigError(f"SubtaskEnv.task must be a non-empty str, got {task!r}")
        self.task = task
        self.answer: str | None = None

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> SubtaskEnv:
        """The env for a delegate call whose arguments are ``{"task": "<what to do>"}``."""
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ConfigError(
                f"the delegate call needs a non-empty string argument 'task', got arguments {dict(arguments)!r}"
            )
        return cls(task)

    @property
    def suggested_sysprompt(self) -> str:
        return "Solve the task you are given. Reply with the answer only."

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        self.answer = None
        return self.task, {"task": self.task}

    def env_step(self, action: str) -> StepOutcome:
        if self.answer is not None:
            raise ConfigError("SubtaskEnv.step called after the answer was given; call reset first")
        self.answer = action
        return StepOutcome(obs="Answer recorded.", reward=0.0, terminated=True, info={"answer": action})
