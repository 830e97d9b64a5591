"""Test cases for submitted programs and how each one is run and judged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from ludic_core.errors import DataError
from ludic_envs.codeexec.process import ExecutionRequest
from ludic_envs.codeexec.result import ExecutionResult

__all__ = [
    "AssertTest",
    "IOTest",
    "TestCase",
    "TestOutcome",
    "TestReport",
    "outputs_match",
    "parse_tests",
]

SOLUTION_FILE = "solution.py"

# Runs the solution as a module named "solution", then the test source read from stdin. Reading the
# tests from stdin (not a file) keeps them out of the directory the solution can list.
_ASSERT_HARNESS = (
    "import sys\n"
    "test_source = sys.stdin.read()\n"
    "sys.stdin.close()\n"
    "namespace = {'__name__': 'solution'}\n"
    "with open('solution.py', encoding='utf-8') as fh:\n"
    "    exec(compile(fh.read(), 'solution.py', 'exec'), namespace)\n"
    "del fh\n"
    "exec(compile(test_source, '<test>', 'exec'), namespace)\n"
)


def outputs_match(actual: str, expected: str) -> bool:
    """Compare stdout line by line, ignoring trailing whitespace and trailing blank lines."""

    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(actual) == lines(expected)


@attrs.frozen
class IOTest:
    """Run the program as a script with ``stdin``; its stdout must equal ``expected_stdout``."""

    stdin: str
    expected_stdout: str

    def request(self, python: str, code: str) -> ExecutionRequest:
        return ExecutionRequest(
            argv=(python, "-I", SOLUTION_FILE), files={SOLUTION_FILE: code}, stdin=self.stdin
        )

    def passed(self, result: ExecutionResult) -> bool:
        return result.ok and outputs_match(result.stdout, self.expected_stdout)

    def describe(self) -> dict[str, Any]:
        return {"kind": "io", "stdin": self.stdin[:200], "expected_stdout": self.expected_stdout[:200]}


@attrs.frozen
class AssertTest:
    """Import the program as a module, then run ``code`` (e.g. ``assert add(1, 2) == 3``)."""

    code: str

    def request(self, python: str, code: str) -> ExecutionRequest:
        return ExecutionRequest(
            argv=(python, "-I", "-c", _ASSERT_HARNESS), files={SOLUTION_FILE: code}, stdin=self.code
        )

    def passed(self, result: ExecutionResult) -> bool:
        return result.ok

    def describe(self) -> dict[str, Any]:
        return {"kind": "assert", "code": self.code[:200]}


TestCase: TypeAlias = IOTest | AssertTest


@attrs.frozen
class TestOutcome:
    """One test: whether it passed and the execution behind it."""

    __test__ = False  # not a pytest class

    index: int
    test: TestCase
    passed: bool
    result: ExecutionResult

    def to_dict(self, max_chars: int = 500) -> dict[str, Any]:
        return {
            "index": self.index,
            "passed": self.passed,
            **self.test.describe(),
            **self.result.to_dict(max_chars),
        }


def _outcome_tuple(values: Iterable[TestOutcome]) -> tuple[TestOutcome, ...]:
    return tuple(values)


@attrs.frozen
class TestReport:
    """All tests of one submission (in order; ``skipped`` counts tests not run after a failure in
    all-or-nothing mode)."""

    __test__ = False

    outcomes: tuple[TestOutcome, ...] = attrs.field(converter=_outcome_tuple)
    total: int
    skipped: int = 0

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def fraction_passed(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def limits_hit(self) -> list[str]:
        return sorted({o.result.limit for o in self.outcomes if o.result.limit is not None})

    def to_dict(self, max_chars: int = 500) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "total": self.total,
            "skipped": self.skipped,
            "fraction_passed": self.fraction_passed,
            "limits_hit": self.limits_hit,
            "tests": [o.to_dict(max_chars) for o in self.outcomes],
        }


def _one(value: TestCase | Mapping[str, Any] | str, index: int) -> TestCase:
    if isinstance(value, (IOTest, AssertTest)):
        return value
    if isinstance(value, str):
        return AssertTest(value)
    if isinstance(value, Mapping):
        if "code" in value:
            return AssertTest(str(value["code"]))
        if "input" in value or "stdin" in value:
            expected = value.get("output", value.get("expected_stdout"))
            if expected is None:
                raise DataError(
                    f"tests[{index}] has stdin but no 'output'/'expected_stdout': {dict(value)!r}"
                )
            return IOTest(str(value.get("input", value.get("stdin", ""))), str(expected))
    raise DataError(
        f"tests[{index}] must be an IOTest, an AssertTest, an assert string, {{'code': ...}} or "
        f"{{'input': ..., 'output': ...}}; got {value!r}"
    )


def parse_tests(
    tests: Iterable[TestCase | Mapping[str, Any] | str] | Mapping[str, Sequence[str]],
) -> list[TestCase]:
    """Accept test cases in the common dataset shapes.

    A list of assert strings (MBPP ``test_list``), of ``{"input", "output"}`` dicts, of test objects,
    or an APPS-style ``{"inputs": [...], "outputs": [...]}`` mapping.
    """
    if isinstance(tests, Mapping):
        inputs, outputs = tests.get("inputs"), tests.get("outputs")
        if inputs is None or outputs is None or len(inputs) != len(outputs):
            raise DataError("APPS-style tests need 'inputs' and 'outputs' lists of equal length")
        return [IOTest(str(i), str(o)) for i, o in zip(inputs, outputs, strict=True)]
    parsed = [_one(t, i) for i, t in enumerate(tests)]
    if not parsed:
        raise DataError("a submission needs at least one test")
    return parsed
