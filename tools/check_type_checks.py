"""Count hand-written int/bool checks in the packages' sources; fail above the limit.

A hand-written check is an ``isinstance(value, T)`` naming ``int`` or ``bool`` (alone or in a tuple) in
the condition of an ``if`` that raises: the shape ``ludic_core.validation`` replaces with one call that
names the field and the value. ``validation.py`` itself is not counted. Run by the ``lint`` nox session::

    python tools/check_type_checks.py            # every check found, then the count against the limit
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 10


def _names_int_or_bool(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("int", "bool")
    return isinstance(node, ast.Tuple) and any(_names_int_or_bool(element) for element in node.elts)


def _is_check(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and len(node.args) == 2
        and _names_int_or_bool(node.args[1])
    )


def hand_written_checks(source: str) -> Iterator[tuple[int, str]]:
    """``(line, condition)`` of each ``if`` that raises on an int/bool ``isinstance``."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.If)
            and any(isinstance(statement, ast.Raise) for statement in node.body)
            and any(_is_check(part) for part in ast.walk(node.test))
        ):
            yield node.lineno, ast.unparse(node.test)


def main() -> int:
    counted = 0
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if path.name == "validation.py":
            continue
        for line, condition in hand_written_checks(path.read_text(encoding="utf-8")):
            counted += 1
            print(f"{relative}:{line}: {condition}")
    verdict = "ok" if counted <= LIMIT else "too many: use ludic_core.validation"
    print(f"{counted} hand-written int/bool checks (limit {LIMIT}): {verdict}")
    return 0 if counted <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
