"""``check_public_api``: what a package root built with :mod:`ludic_core.exports` promises."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["check_public_api"]


def check_public_api(
    package: str,
    *,
    not_on_import: Sequence[str] = (),
    not_on_resolve: Sequence[str] = (),
    timeout_s: float = 180.0,
) -> None:
    """Raise ``AssertionError`` unless the root of ``package`` keeps its promises.

    * ``__all__`` has no duplicates and names exactly the lazily resolved names (plus ``__version__``);
    * every name resolves to the very object its submodule defines, and shows in ``dir()``;
    * the ``if TYPE_CHECKING:`` imports (what type checkers see) match the lazy map;
    * an unknown name raises ``AttributeError``;
    * in a fresh interpreter, ``import package`` imports none of its submodules (but the hooks'
      own :mod:`ludic_core.exports`) and none of the
      top-level modules in ``not_on_import``; resolving every exported name imports none in
      ``not_on_resolve`` (modules ``"pkg.sub"`` are matched exactly, bare names as top-level packages).
    """
    root = importlib.import_module(package)
    names: list[str] = list(root.__all__)
    module_of: dict[str, str] = dict(root._MODULE_OF)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"{package}.__all__ lists {duplicates} more than once"
    assert set(names) - {"__version__"} == set(module_of), (
        f"{package}.__all__ and its lazy map differ: only in __all__ "
        f"{sorted(set(names) - {'__version__'} - set(module_of))}, only in the map "
        f"{sorted(set(module_of) - set(names))}"
    )
    for name, module in module_of.items():
        defined = getattr(importlib.import_module(module), name)
        assert getattr(root, name) is defined, f"{package}.{name} is not {module}.{name}"
        assert name in dir(root), f"{name} missing from dir({package})"
    assert _type_checking_imports(root) == module_of, (
        f"{package}'s `if TYPE_CHECKING:` imports differ from its lazy map"
    )
    try:
        root.NoSuchName  # noqa: B018 (the lookup is the test)
    except AttributeError:
        pass
    else:
        raise AssertionError(f"{package}.NoSuchName resolved instead of raising AttributeError")

    loaded = _modules_after(f"import {package}", timeout_s)
    own = [m for m in loaded if m.startswith(f"{package}.") and m != "ludic_core.exports"]
    assert not own, f"import {package} imported its submodules {own}"
    assert not (hit := _matching(loaded, not_on_import)), f"import {package} imported {hit}"
    resolve_all = f"import {package}\nfor name in {package}.__all__:\n    getattr({package}, name)"
    loaded = _modules_after(resolve_all, timeout_s)
    assert not (hit := _matching(loaded, not_on_resolve)), f"resolving {package}.__all__ imported {hit}"


def _type_checking_imports(root: object) -> dict[str, str | None]:
    tree = ast.parse(inspect.getsource(root))  # type: ignore[arg-type]
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    )
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def _modules_after(code: str, timeout_s: float) -> list[str]:
    script = f"import sys\n{code}\nprint(sorted(sys.modules))\n"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s, check=True
    )
    loaded: list[str] = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    return loaded


def _matching(loaded: Sequence[str], forbidden: Sequence[str]) -> list[str]:
    return [
        m for m in loaded if any(m == f or ("." not in f and m.partition(".")[0] == f) for f in forbidden)
    ]
