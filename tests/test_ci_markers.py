"""The learning tests run in CI: the ``tests`` and ``examples`` nox sessions' marker expression must
select tests marked ``slow`` (the learning tests in ``packages/ludic-train/tests/test_learning.py``)
and ``slow`` + ``redis`` (the pipeline's learning run in ``test_pipeline_learner.py``). Deselecting them would let a training
change that stops learning pass CI unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

NOXFILE = Path(__file__).resolve().parents[1] / "noxfile.py"


def _test_markers_expression() -> str:
    tree = ast.parse(NOXFILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "TEST_MARKERS" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    raise AssertionError(f"{NOXFILE} defines no TEST_MARKERS")


def _selects(expression: str, markers: set[str]) -> bool:
    """Evaluate a pytest ``-m`` expression (names joined by and / or / not, with parentheses)."""
    tree = ast.parse(expression, mode="eval")
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.Name, ast.Load)
    for node in ast.walk(tree):
        assert isinstance(node, allowed), f"unexpected {type(node).__name__} in -m {expression!r}"
    names = {node.id: node.id in markers for node in ast.walk(tree) if isinstance(node, ast.Name)}
    # Safe to evaluate: the walk above admits only names and boolean operators.
    return bool(eval(compile(tree, "<markers>", "eval"), {"__builtins__": {}}, names))


def test_selects_is_a_faithful_marker_evaluator() -> None:
    assert _selects("not gpu and not vllm", {"slow"})
    assert not _selects("not gpu and not vllm", {"slow", "gpu"})
    assert not _selects("not (slow or redis)", {"redis"})


@pytest.mark.parametrize("markers", [{"slow"}, {"slow", "redis"}], ids=["slow", "slow+redis"])
def test_ci_sessions_run_learning_tests(markers: set[str]) -> None:
    if not NOXFILE.exists():
        pytest.skip("noxfile.py is not part of this checkout")
    expression = _test_markers_expression()
    assert _selects(expression, markers), f"TEST_MARKERS = {expression!r} deselects tests marked {markers}"
