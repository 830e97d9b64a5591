"""Fail when a module of one Ludic package imports another Ludic package other than ludic_core
(ludic_core imports none of them): the packages are published and installed separately, so an import
across them breaks the install that lacks the other one. Tests under ``packages/*/tests`` may import
siblings; only ``packages/*/src`` is checked.

    python tools/check_package_imports.py   # run by the `lint` nox session
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = "ludic_core"


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every absolute import in ``tree``, lazy ones inside functions included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


def violations(root: Path) -> list[str]:
    sources = sorted(root.glob("packages/*/src/*"))
    packages = {path.name for path in sources if path.is_dir()}
    found: list[str] = []
    for package_dir in sources:
        own = package_dir.name
        allowed = {own} if own == CORE else {own, CORE}
        for path in sorted(package_dir.rglob("*.py")):
            for line, module in imported_modules(ast.parse(path.read_text(), filename=str(path))):
                top = module.split(".")[0]
                if top in packages and top not in allowed:
                    where = path.relative_to(root)
                    found.append(
                        f"{where}:{line}: {own} imports {module} (allowed: {', '.join(sorted(allowed))})"
                    )
    return found


def main() -> int:
    found = violations(ROOT)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(
            f"{len(found)} import(s) across Ludic packages; only ludic_core may be imported", file=sys.stderr
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
