"""One product to compute: the subtask a parent agent delegates in :class:`SumOfProductsEnv`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ludic_core.errors import ConfigError
from ludic_core.types import Info
from ludic_core.validation import check_int
from ludic_envs.delegation.grading import NumberQuestionEnv

__all__ = ["ProductQAEnv", "parse_product"]

# "23 × 45", "23x45", "23 * 45": the forms a model is likely to write a product in.
_PRODUCT = re.compile(r"(-?\d{1,18})\s*[×xX*]\s*(-?\d{1,18})")


def parse_product(text: str) -> tuple[int, int]:
    """The factors of the first product written in ``text`` (``"Compute 23 × 45."`` -> ``(23, 45)``)."""
    match = _PRODUCT.search(text)
    if match is None:
        raise ConfigError(f"no product such as '23 × 45' in the task text {text[:120]!r}")
    return int(match.group(1)), int(match.group(2))


class ProductQAEnv(NumberQuestionEnv):
    """Compute ``a × b``; one step, ``correct_reward`` for the exact product, else ``incorrect_reward``.

    The answer is the last number of the action (``"1,035"`` and ``"a*b = 1035"`` both count).
    Info: ``a`` and ``b``, then :class:`NumberQuestionEnv`'s.
    """

    def __init__(
        self,
        a: int,
        b: int,
        *,
        correct_reward: float = 1.0,
        incorrect_reward: float = 0.0,
        agent_id: str = "agent_0",
    ) -> None:
        super().__init__(correct_reward=correct_reward, incorrect_reward=incorrect_reward, agent_id=agent_id)
        self.a = check_int("ProductQAEnv.a", a)
        self.b = check_int("ProductQAEnv.b", b)
        self.answered = False  # the question is set at construction: it can be answered before a reset

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> ProductQAEnv:
        """The env of a delegate call: ``{"task": "23 × 45"}`` (any text holding one product), or
        ``{"a": 23, "b": 45}``. Use it as ``DelegatingProtocol(child_env_factory=...)``."""
        if "a" in arguments or "b" in arguments:
            return cls(
                check_int("ProductQAEnv.a", arguments.get("a")),
                check_int("ProductQAEnv.b", arguments.get("b")),
            )
        task = arguments.get("task")
        if not isinstance(task, str):
            raise ConfigError(
                f"a product subtask needs a string 'task' such as '23 × 45' (or ints 'a' and 'b'), got "
                f"arguments {dict(arguments)!r}"
            )
        return cls(*parse_product(task))

    @property
    def question(self) -> str:
        return f"{self.a} × {self.b}"

    @property
    def target(self) -> int:
        return self.a * self.b

    def question_info(self) -> Info:
        return {"a": self.a, "b": self.b}

    @property
    def suggested_sysprompt(self) -> str:
        return "Compute the product you are given. Reply with the number only."

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return self.prompt()
