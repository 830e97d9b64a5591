"""GSM8K: grade-school maths word problems with a numeric final answer after ``####``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from ludic_envs.qa.env import DatasetQAEnv
from ludic_envs.qa.latex import last_boxed
from ludic_envs.qa.loading import DataFiles, load_rows
from ludic_envs.qa.numeric import extract_gsm8k_target, numbers_match, parse_number

__all__ = ["GSM8K_HUB_NAME", "GSM8K_SYSTEM_PROMPT", "gsm8k_answer", "make_gsm8k_env"]

GSM8K_HUB_NAME = ("openai/gsm8k", "main")
GSM8K_SYSTEM_PROMPT = (
    "Solve the math word problem step by step. End your reply with the final numeric answer on its own "
    "line, after '####'."
)


def _format(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    try:
        decimal = value.numerator / value.denominator
    except OverflowError:  # beyond float range: keep the exact fraction
        return f"{value.numerator}/{value.denominator}"
    return repr(decimal) if Fraction(decimal) == value else f"{value.numerator}/{value.denominator}"


def gsm8k_answer(text: str) -> str | None:
    """The number a reply commits to: after the last ``####``, else in the last ``\\boxed{}``, else the
    last number in the text. Returned in canonical form (``"1234.5"``), or None when there is none."""
    if "####" in text:
        candidate = extract_gsm8k_target(text)
    else:
        candidate = last_boxed(text) or text
    value = parse_number(candidate)
    return None if value is None else _format(value)


def make_gsm8k_env(
    *,
    split: str = "test",
    data_files: DataFiles | None = None,
    dataset: str = GSM8K_HUB_NAME[0],
    dataset_config: str | None = GSM8K_HUB_NAME[1],
    index: int | None = None,
    sample: Mapping[str, Any] | None = None,
    system_prompt: str | None = GSM8K_SYSTEM_PROMPT,
    **kwargs: Any,
) -> DatasetQAEnv:
    """A GSM8K env. The row is ``sample`` if given, else row ``index`` of the split (loaded once per
    process from ``data_files`` or the hub), else a row drawn from the reset seed.

    Remaining keyword arguments (rewards, ``seed``, ``prompt_builder``...) go to :class:`DatasetQAEnv`.
    """
    samples: Sequence[Mapping[str, Any]] | None = None
    if sample is None:
        samples = load_rows(dataset, name=dataset_config, split=split, data_files=data_files)
    return DatasetQAEnv(
        sample,
        samples=samples,
        index=index,
        prompt_key="question",
        answer_key="answer",
        target_parser=extract_gsm8k_target,
        answer_parser=gsm8k_answer,
        verifier=numbers_match,
        system_prompt=system_prompt,
        **kwargs,
    )
