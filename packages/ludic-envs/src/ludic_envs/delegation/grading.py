"""The one-shot numeric answer both delegation envs grade: parse the reply, compare, reward."""

from __future__ import annotations

from ludic_core.types import Info, StepOutcome
from ludic_envs.qa.numeric import parse_number

__all__ = ["grade_number"]


def grade_number(
    action: str,
    *,
    target: int,
    question: str,
    correct_reward: float,
    incorrect_reward: float,
    info: Info | None = None,
) -> StepOutcome:
    """The terminal outcome of answering ``question`` (whose value is ``target``) with ``action``;
    ``info`` adds the env's own fields before the grading ones."""
    parsed = parse_number(action)
    correct = parsed is not None and parsed == target
    return StepOutcome(
        obs="Correct." if correct else f"Incorrect: {question} = {target}.",
        reward=correct_reward if correct else incorrect_reward,
        terminated=True,
        info={
            **(info or {}),
            "target": target,
            "parsed_answer": None if parsed is None else str(parsed),
            "correct": correct,
        },
    )
