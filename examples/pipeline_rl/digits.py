"""A toy task for the pipeline example (``--task digits``): answer with digits.

One step per episode; the reward is the fraction of the answer's non-space characters that are digits.
A random tiny model (``--model tiny``) starts near 0.35 with the test tokenizer (its vocabulary is
full of number tokens) and GRPO drives it toward 1.0 within a few dozen steps on a CPU, so the
actor/learner pipeline can be seen to learn in a smoke run, which Tic-Tac-Toe cannot show at that size.
"""

from __future__ import annotations

from ludic_core.env import SingleAgentEnv
from ludic_core.parsing import ParseResult
from ludic_core.types import Info, StepOutcome

PROMPT = "Say a number."


class DigitsEnv(SingleAgentEnv):
    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return PROMPT, {}

    def env_step(self, action: str) -> StepOutcome:
        chars = [c for c in action if not c.isspace()]
        reward = sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0
        return StepOutcome(obs="", reward=reward, terminated=True)


def any_text_parser(text: str) -> ParseResult:
    """Every completion is the action (an empty one scores 0): the reward is a pure function of the text."""
    return ParseResult(action=text)
