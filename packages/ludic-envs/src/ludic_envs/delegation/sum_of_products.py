"""A multi-part arithmetic question whose parts a sub-agent can solve: a sum of several products."""

from __future__ import annotations

import random

from ludic_core.types import Info
from ludic_core.validation import check_int
from ludic_envs.delegation.grading import NumberQuestionEnv

__all__ = ["SumOfProductsEnv"]

SYSTEM_PROMPT = (
    "You answer arithmetic questions exactly. You can hand one product to a helper by calling the "
    '`delegate` tool with {"task": "<a> × <b>"}; it replies with the product. '
    "Reply with the final number only."
)


class SumOfProductsEnv(NumberQuestionEnv):
    """Compute ``a1 × b1 + a2 × b2 + …`` (``num_parts`` products of factors in ``[min_factor,
    max_factor]``, drawn from the reset seed); one step.

    Each product is a subtask a sub-agent can solve in a :class:`ProductQAEnv`: under
    ``DelegatingProtocol(child_env_factory=ProductQAEnv.from_arguments)`` the agent delegates the parts
    and adds the answers. Reward: ``correct_reward`` for the exact sum (the last number of the action),
    else ``incorrect_reward``. Info: ``parts`` (``[[a, b], ...]``), ``target``, ``parsed_answer``,
    ``correct``. ``seed`` seeds the env's own RNG; ``reset(seed=...)`` reseeds it for that episode.
    """

    def __init__(
        self,
        *,
        num_parts: int = 3,
        min_factor: int = 11,
        max_factor: int = 99,
        correct_reward: float = 1.0,
        incorrect_reward: float = 0.0,
        seed: int | None = None,
        agent_id: str = "agent_0",
    ) -> None:
        super().__init__(correct_reward=correct_reward, incorrect_reward=incorrect_reward, agent_id=agent_id)
        check_int("SumOfProductsEnv.num_parts", num_parts, 1)
        check_int("SumOfProductsEnv.min_factor", min_factor, 0)
        check_int("SumOfProductsEnv.max_factor", max_factor, min_factor)
        self.num_parts = num_parts
        self.min_factor = min_factor
        self.max_factor = max_factor
        self._rng = random.Random(seed)
        self.parts: list[tuple[int, int]] = []

    @property
    def target(self) -> int:
        return sum(a * b for a, b in self.parts)

    @property
    def question(self) -> str:
        return " + ".join(f"{a} × {b}" for a, b in self.parts)

    def question_info(self) -> Info:
        return {"parts": [list(p) for p in self.parts]}

    @property
    def suggested_sysprompt(self) -> str:
        return SYSTEM_PROMPT

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        if seed is not None:
            self._rng = random.Random(seed)
        draw = self._rng.randint
        self.parts = [
            (draw(self.min_factor, self.max_factor), draw(self.min_factor, self.max_factor))
            for _ in range(self.num_parts)
        ]
        return self.prompt()
