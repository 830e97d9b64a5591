"""``check_public_api``: what a package root built with :mod:`ludic_core.exports` promises."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from collections.abc import Sequence

from ludic_core.exports import type_checking_imports

__all__ = ["check_public_api"]


def check_public_api(
    package: str,
    *,
    not_on_import: Sequence[str] = (),
    not_on_resolve: Sequence[str] = (),
    timeout_s: float = 180.0,
) -> None:
    """Raise ``AssertionError`` unless the root of ``package`` keeps its promises.

    * every name its ``if TYPE_CHECKING:`` block imports (what type checkers see) is in ``__all__``
      and ``dir()``, and resolves to the very object its submodule defines;
    * an unknown name raises ``AttributeError``;
    * in a fresh interpreter, ``import package`` imports none of its submodules (but the hooks'
      own :mod:`ludic_core.exports`) and none of the
      top-level modules in ``not_on_import``; resolving every exported name imports none in
      ``not_on_resolve`` (modules ``"pkg.sub"`` are matched exactly, bare names as top-level packages).
    """
    root = importlib.import_module(package)
    module_of = type_checking_imports(inspect.getsource(root))
    assert root.__all__ == [*module_of, "__version__"], f"{package}.__all__ is not its exports"
    for name, module in module_of.items():
        defined = getattr(importlib.import_module(module), name)
        assert getattr(root, name) is defined, f"{package}.{name} is not {module}.{name}"
        assert name in dir(root), f"{name} missing from dir({package})"
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
