"""MATH (and MATH-500): competition problems with a LaTeX final answer, usually in ``\\boxed{}``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ludic_core.errors import DataError
from ludic_envs.qa.env import DatasetQAEnv
from ludic_envs.qa.equivalence import grade_math_answer
from ludic_envs.qa.latex import last_boxed
from ludic_envs.qa.loading import DataFiles, load_rows

__all__ = ["MATH500_HUB_NAME", "MATH_SYSTEM_PROMPT", "MathQAEnv", "make_math_env", "math_answer"]

MATH500_HUB_NAME = "HuggingFaceH4/MATH-500"
MATH_SYSTEM_PROMPT = "Solve the problem. Put your final answer within \\boxed{}."


def math_answer(text: str) -> str | None:
    """The reply's final answer: the last ``\\boxed{}``, else the whole stripped reply (a parser
    may already have extracted the answer), or None when empty."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    return text.strip() or None


class MathQAEnv(DatasetQAEnv):
    """A :class:`DatasetQAEnv` whose reference answer is the row's ``answer`` field when present
    (MATH-500), else the last ``\\boxed{}`` of its ``solution`` (the original MATH rows)."""

    # Grading may wait seconds on the symbolic-check process: step off the event loop so other
    # episodes keep sampling and the engine's episode timeout still applies.
    blocking_step = True

    def target(self, sample: Mapping[str, Any]) -> str:
        answer = sample.get(self.answer_key)
        if answer is not None and str(answer).strip():
            return str(answer).strip()
        solution = sample.get("solution")
        boxed = last_boxed(str(solution)) if solution is not None else None
        if boxed is None:
            raise DataError(
                f"sample has neither a non-empty {self.answer_key!r} nor a \\boxed answer in 'solution'; "
                f"keys: {sorted(sample)}"
            )
        return boxed.strip()


def make_math_env(
    *,
    split: str = "test",
    data_files: DataFiles | None = None,
    dataset: str = MATH500_HUB_NAME,
    dataset_config: str | None = None,
    index: int | None = None,
    sample: Mapping[str, Any] | None = None,
    system_prompt: str | None = MATH_SYSTEM_PROMPT,
    use_math_verify: bool = True,
    grading_timeout_s: float = 5.0,
    **kwargs: Any,
) -> MathQAEnv:
    """A MATH env (MATH-500 by default); rows chosen as in :func:`~ludic_envs.qa.gsm8k.make_gsm8k_env`.

    Answers are compared with ``math-verify`` when installed (and ``use_math_verify``), otherwise by
    normalised strings (:func:`~ludic_envs.qa.latex.normalize_math_answer`). math-verify runs in a
    child process killed after ``grading_timeout_s`` seconds; an answer that still cannot be graded
    after a second try fails the episode (:class:`~ludic_envs.qa.equivalence.UngradedAnswerError`)
    instead of being paid as wrong.
    """
    samples: Sequence[Mapping[str, Any]] | None = None
    if sample is None:
        samples = load_rows(dataset, name=dataset_config, split=split, data_files=data_files)
    return MathQAEnv(
        sample,
        samples=samples,
        index=index,
        prompt_key="problem",
        answer_key="answer",
        answer_parser=math_answer,
        verifier=partial(grade_math_answer, use_math_verify=use_math_verify, timeout_s=grading_timeout_s),
        system_prompt=system_prompt,
        **kwargs,
    )
