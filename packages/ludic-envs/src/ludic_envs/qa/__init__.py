"""Dataset question answering: :class:`DatasetQAEnv` and ready envs for GSM8K and MATH."""

from ludic_envs.qa.env import DatasetQAEnv
from ludic_envs.qa.equivalence import (
    MathVerdict,
    UngradedAnswerError,
    grade_math_answer,
    math_answers_equivalent,
    math_verify_available,
)
from ludic_envs.qa.gsm8k import gsm8k_answer, make_gsm8k_env
from ludic_envs.qa.latex import last_boxed, normalize_math_answer
from ludic_envs.qa.loading import load_rows
from ludic_envs.qa.math_qa import MathQAEnv, make_math_env, math_answer
from ludic_envs.qa.numeric import extract_gsm8k_target, numbers_match, parse_number

__all__ = [
    "DatasetQAEnv",
    "MathQAEnv",
    "MathVerdict",
    "UngradedAnswerError",
    "extract_gsm8k_target",
    "grade_math_answer",
    "gsm8k_answer",
    "last_boxed",
    "load_rows",
    "make_gsm8k_env",
    "make_math_env",
    "math_answer",
    "math_answers_equivalent",
    "math_verify_available",
    "normalize_math_answer",
    "numbers_match",
    "parse_number",
]
