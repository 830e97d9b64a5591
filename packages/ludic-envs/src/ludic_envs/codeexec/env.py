"""An env whose action is a Python program, rewarded by the tests it passes in the sandbox."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ludic_core.errors import ConfigError, DataError, ProtocolError
from ludic_core.types import Info, StepOutcome
from ludic_envs.codeexec.limits import SandboxLimits
from ludic_envs.codeexec.pool import SandboxPool, default_pool
from ludic_envs.codeexec.testcases import TestCase, TestReport, parse_tests
from ludic_envs.row_env import DatasetRowEnv

__all__ = ["CODE_SYSTEM_PROMPT", "CodeExecEnv", "strip_code_fence"]

CODE_SYSTEM_PROMPT = (
    "Write a complete Python 3 program that solves the task. Reply with the code only, in one "
    "```python block."
)
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def strip_code_fence(text: str) -> str:
    """The body of the last fenced code block, or the text itself when there is none."""
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text


class CodeExecEnv(DatasetRowEnv):
    """One task per episode: the prompt, then one program, graded by running it against the tests.

    Rows hold the prompt under ``prompt_key`` and the tests under ``tests_key`` in any shape that
    :func:`~ludic_envs.codeexec.testcases.parse_tests` accepts (assert strings, ``{"input",
    "output"}`` dicts, APPS ``{"inputs", "outputs"}``). Rows are picked as :class:`~ludic_envs.row_env.DatasetRowEnv` says.

    ``reward_mode="fraction"`` pays the fraction of tests passed; ``"all_or_nothing"`` pays
    ``correct_reward`` only when all pass (and stops at the first failure). An empty program (after
    stripping a Markdown fence when ``strip_fence``) pays ``no_code_reward`` without running.
    ``step`` blocks until the tests have run (the sandbox pool bounds concurrency process-wide).
    """

    def __init__(
        self,
        sample: Mapping[str, Any] | None = None,
        *,
        samples: Sequence[Mapping[str, Any]] | None = None,
        index: int | None = None,
        prompt_key: str = "prompt",
        tests_key: str = "tests",
        reward_mode: Literal["fraction", "all_or_nothing"] = "fraction",
        correct_reward: float = 1.0,
        no_code_reward: float = 0.0,
        strip_fence: bool = True,
        limits: SandboxLimits | Mapping[str, Any] | None = None,
        pool: SandboxPool | None = None,
        system_prompt: str | None = CODE_SYSTEM_PROMPT,
        seed: int | None = None,
        agent_id: str = "agent_0",
    ) -> None:
        super().__init__(sample, samples, index, system_prompt=system_prompt, seed=seed, agent_id=agent_id)
        if reward_mode not in ("fraction", "all_or_nothing"):
            raise ConfigError(f"reward_mode must be 'fraction' or 'all_or_nothing', got {reward_mode!r}")
        self.prompt_key = prompt_key
        self.tests_key = tests_key
        self.reward_mode = reward_mode
        self.correct_reward = float(correct_reward)
        self.no_code_reward = float(no_code_reward)
        self.strip_fence = strip_fence
        if limits is None or isinstance(limits, SandboxLimits):
            self.limits = limits
        else:
            self.limits = SandboxLimits(**limits)
        self._pool = pool
        self._sample: Mapping[str, Any] | None = None
        self._tests: list[TestCase] = []
        self._done = False

    @property
    def pool(self) -> SandboxPool:
        return self._pool if self._pool is not None else default_pool()

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        sample, index = self.pick_row(seed)
        for key in (self.prompt_key, self.tests_key):
            if key not in sample:
                raise DataError(f"code sample has no {key!r}; its keys are {sorted(sample)}")
        self._sample = sample
        self._tests = parse_tests(sample[self.tests_key])
        self._done = False
        info: Info = {"num_tests": len(self._tests)}
        if index is not None:
            info["sample_index"] = index
        for key in ("task_id", "id", "problem_id"):
            if key in sample:
                info["task_id"] = str(sample[key])
                break
        return str(sample[self.prompt_key]), info

    def env_step(self, action: str) -> StepOutcome:
        code_or_outcome = self._begin_step(action)
        if isinstance(code_or_outcome, StepOutcome):
            return code_or_outcome
        all_or_nothing = self.reward_mode == "all_or_nothing"
        report = self.pool.run_sync(
            code_or_outcome, self._tests, limits=self.limits, all_or_nothing=all_or_nothing
        )
        return self._grade(report)

    async def aenv_step(self, action: str) -> StepOutcome:
        # What protocols call: the event loop (other episodes) keeps running while the tests execute.
        code_or_outcome = self._begin_step(action)
        if isinstance(code_or_outcome, StepOutcome):
            return code_or_outcome
        all_or_nothing = self.reward_mode == "all_or_nothing"
        report = await self.pool.run(
            code_or_outcome, self._tests, limits=self.limits, all_or_nothing=all_or_nothing
        )
        return self._grade(report)

    def _begin_step(self, action: str) -> str | StepOutcome:
        """The program to run, or the outcome when there is nothing to run."""
        if self._sample is None:
            raise ProtocolError(f"{self.name}: call reset() before step()")
        if self._done:
            raise ProtocolError(f"{self.name}: the program was already graded; call reset() first")
        self._done = True
        code = strip_code_fence(action) if self.strip_fence else action
        if not code.strip():
            info: Info = {"passed": 0, "total": len(self._tests), "fraction_passed": 0.0, "code_found": False}
            return StepOutcome(obs="No code found.", reward=self.no_code_reward, terminated=True, info=info)
        return code

    def _grade(self, report: TestReport) -> StepOutcome:
        if self.reward_mode == "all_or_nothing":
            reward = self.correct_reward if report.all_passed else 0.0
        else:
            reward = self.correct_reward * report.fraction_passed
        return StepOutcome(
            obs=self._feedback(report), reward=reward, terminated=True, info=self._info(report)
        )

    @staticmethod
    def _info(report: TestReport) -> Info:
        return {**report.to_dict(max_chars=400), "code_found": True}

    @staticmethod
    def _feedback(report: TestReport) -> str:
        lines = [f"Passed {report.passed}/{report.total} tests."]
        first_failure = next((o for o in report.outcomes if not o.passed), None)
        if first_failure is not None:
            result = first_failure.result
            why = f"hit the {result.limit.replace('_', ' ')} limit" if result.limit else "failed"
            lines.append(f"Test {first_failure.index + 1} {why}.")
            tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
            lines.extend(tail)
        return "\n".join(lines)
