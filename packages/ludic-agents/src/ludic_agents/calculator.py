"""The calculator tool: exact integer arithmetic on an expression the model writes. Registered as the
tool ``"calculator"`` (entry-point group ``ludic.tools``), so an agent built by name can offer it
(``ludic train calculator-tool-use``).

Only ``+``, ``-``, ``*`` (also written ``×`` or ``x``), ``/`` and parentheses over integers are read;
anything else (names, calls, powers, floats) is refused with a message the model sees, so a tool call
can never run code. Division is exact: ``7 / 2`` is ``3.5``, ``6 / 3`` is ``2``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from fractions import Fraction

from ludic_agents.tools import Tool

__all__ = ["MAX_EXPRESSION_CHARS", "calculate", "calculator_tool"]

MAX_EXPRESSION_CHARS = 200

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"only integers, + - * / and parentheses are allowed, got {ast.unparse(node)!r}")


def calculate(expression: str) -> str:
    """Evaluate ``expression`` exactly; the result as the model should copy it (``"1035"``, ``"3.5"``)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.replace("×", "*").replace("x", "*").replace("X", "*").replace(",", "")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot read {expression!r} as arithmetic ({exc.msg})") from None
    result = _value(tree.body)
    return str(result.numerator) if result.denominator == 1 else str(float(result))


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: integers with + - * / and parentheses, e.g. "123 * 45 + 6".
    """
    return calculate(expression)


def calculator_tool() -> Tool:
    """The ``calculator`` tool as the agent offers it (schema from the signature and docstring)."""
    return Tool.from_function(calculator, timeout_s=5.0)
