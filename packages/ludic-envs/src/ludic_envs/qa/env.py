"""One question per episode, graded by a verifier."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ludic_core.errors import ConfigError, DataError, ProtocolError
from ludic_core.types import Info, StepOutcome
from ludic_envs.qa.equivalence import UngradedAnswerError
from ludic_envs.row_env import DatasetRowEnv

__all__ = ["AnswerParser", "DatasetQAEnv", "PromptBuilder", "TargetParser", "Verifier"]

PromptBuilder = Callable[[Mapping[str, Any]], str]
TargetParser = Callable[[str], str]
AnswerParser = Callable[[str], "str | None"]
# The result's truth value decides; a result with a true ``timed_out`` attribute (such as an
# ungraded ``MathVerdict``) is no decision: the step raises UngradedAnswerError.
Verifier = Callable[[str, str], object]

_ID_KEYS = ("id", "unique_id", "uid", "question_id")


def _exact_match(predicted: str, target: str) -> bool:
    return predicted.strip().casefold() == target.strip().casefold()


def _strip(text: str) -> str | None:
    text = text.strip()
    return text or None


def _finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    return value


class DatasetQAEnv(DatasetRowEnv):
    """Ask one question, grade one answer, end the episode; the question's row is picked as
    :class:`~ludic_envs.row_env.DatasetRowEnv` says.

    Grading: ``answer_parser`` extracts the answer from the action (None: no answer found, which is
    graded incorrect), ``target_parser`` extracts the reference from ``sample[answer_key]``, and
    ``verifier(parsed_answer, target)`` decides (its truth value). A verdict that reports ``timed_out``
    (the MATH env's, when its symbolic check could not finish) is no decision: the step raises
    :class:`~ludic_envs.qa.equivalence.UngradedAnswerError`, so the episode fails (dropped from
    training and counted, a failure in evals) instead of paying a right answer as wrong. Rewards:
    ``correct_reward``, ``incorrect_reward``, and ``no_answer_reward`` (defaults to ``incorrect_reward``).
    """

    def __init__(
        self,
        sample: Mapping[str, Any] | None = None,
        *,
        samples: Sequence[Mapping[str, Any]] | None = None,
        index: int | None = None,
        prompt_key: str = "question",
        answer_key: str = "answer",
        prompt_builder: PromptBuilder | None = None,
        target_parser: TargetParser | None = None,
        answer_parser: AnswerParser | None = None,
        verifier: Verifier | None = None,
        system_prompt: str | None = None,
        correct_reward: float = 1.0,
        incorrect_reward: float = 0.0,
        no_answer_reward: float | None = None,
        seed: int | None = None,
        agent_id: str = "agent_0",
    ) -> None:
        super().__init__(sample, samples, index, system_prompt=system_prompt, seed=seed, agent_id=agent_id)
        self.prompt_key = prompt_key
        self.answer_key = answer_key
        self.prompt_builder = prompt_builder
        self.target_parser: TargetParser = target_parser or str.strip
        self.answer_parser: AnswerParser = answer_parser or _strip
        self.verifier: Verifier = verifier or _exact_match
        self.correct_reward = _finite("correct_reward", correct_reward)
        self.incorrect_reward = _finite("incorrect_reward", incorrect_reward)
        self.no_answer_reward = (
            self.incorrect_reward
            if no_answer_reward is None
            else _finite("no_answer_reward", no_answer_reward)
        )
        self._sample: Mapping[str, Any] | None = None
        self._sample_index: int | None = None
        self._done = False

    @property
    def sample(self) -> Mapping[str, Any]:
        if self._sample is None:
            raise ProtocolError(f"{self.name}: call reset() before reading the sample")
        return self._sample

    def question_id(self, sample: Mapping[str, Any], index: int | None) -> str:
        for key in _ID_KEYS:
            if sample.get(key) is not None:
                return str(sample[key])
        return str(index) if index is not None else "0"

    def build_prompt(self, sample: Mapping[str, Any]) -> str:
        if self.prompt_builder is not None:
            return self.prompt_builder(sample)
        if self.prompt_key not in sample:
            raise DataError(f"sample has no prompt_key {self.prompt_key!r}; its keys are {sorted(sample)}")
        return str(sample[self.prompt_key])

    def target(self, sample: Mapping[str, Any]) -> str:
        if self.answer_key not in sample:
            raise DataError(f"sample has no answer_key {self.answer_key!r}; its keys are {sorted(sample)}")
        return self.target_parser(str(sample[self.answer_key]))

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        self._sample, self._sample_index = self.pick_row(seed)
        self._done = False
        info: Info = {"question_id": self.question_id(self._sample, self._sample_index)}
        if self._sample_index is not None:
            info["sample_index"] = self._sample_index
        return self.build_prompt(self._sample), info

    def env_step(self, action: str) -> StepOutcome:
        sample = self.sample
        if self._done:
            raise ProtocolError(f"{self.name}: the question was already answered; call reset() first")
        self._done = True
        target = self.target(sample)
        parsed = self.answer_parser(action)
        verdict = self.verifier(parsed, target) if parsed is not None else False
        if getattr(verdict, "timed_out", False) is True:
            raise UngradedAnswerError(
                f"{self.name}: the answer {parsed!r} to question "
                f"{self.question_id(sample, self._sample_index)!r} could not be graded (the verifier timed "
                f"out); the episode is failed rather than paid as incorrect"
            )
        correct = bool(verdict)
        if parsed is None:
            reward, obs = self.no_answer_reward, f"No answer found. Expected {target}."
        elif correct:
            reward, obs = self.correct_reward, "Correct."
        else:
            reward, obs = self.incorrect_reward, f"Incorrect. Expected {target}."
        info: Info = {
            "question_id": self.question_id(sample, self._sample_index),
            "raw_action": action,
            "parsed_answer": parsed,
            "target_answer": target,
            "answer_found": parsed is not None,
            "correct": correct,
        }
        return StepOutcome(obs=obs, reward=reward, terminated=True, info=info)
