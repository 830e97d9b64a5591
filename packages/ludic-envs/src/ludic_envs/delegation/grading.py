"""The one-shot numeric question both delegation envs ask: parse the reply, compare, reward."""

from __future__ import annotations

import abc

from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError
from ludic_core.types import Info, StepOutcome
from ludic_envs.qa.numeric import parse_number

__all__ = ["NumberQuestionEnv"]


class NumberQuestionEnv(SingleAgentEnv):
    """One step: the answer to ``question`` is the last number of the action, paid ``correct_reward``
    when it equals ``target``, else ``incorrect_reward``. Info: :meth:`question_info`, then ``target``,
    ``parsed_answer`` (None when the action states no number) and ``correct``. A subclass sets
    ``answered`` False whenever a question is open."""

    def __init__(self, *, correct_reward: float, incorrect_reward: float, agent_id: str) -> None:
        super().__init__(agent_id=agent_id)
        self.correct_reward = float(correct_reward)
        self.incorrect_reward = float(incorrect_reward)
        self.answered = True

    @property
    @abc.abstractmethod
    def question(self) -> str: ...

    @property
    @abc.abstractmethod
    def target(self) -> int: ...

    def question_info(self) -> Info:
        """The env's own info fields of the question, in both the reset's info and the step's."""
        return {}

    def prompt(self) -> tuple[str, Info]:
        """The observation and info that open the question."""
        self.answered = False
        return f"Compute {self.question}. Reply with the number only.", self.question_info()

    def env_step(self, action: str) -> StepOutcome:
        if self.answered:
            raise ConfigError(
                f"{type(self).__name__}.step called with no open question (before reset or after the "
                "answer); call reset"
            )
        self.answered = True
        parsed = parse_number(action)
        correct = parsed is not None and parsed == self.target
        return StepOutcome(
            obs="Correct." if correct else f"Incorrect: {self.question} = {self.target}.",
            reward=self.correct_reward if correct else self.incorrect_reward,
            terminated=True,
            info={
                **self.question_info(),
                "target": self.target,
                "parsed_answer": None if parsed is None else str(parsed),
                "correct": correct,
            },
        )
