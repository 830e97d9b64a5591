"""Lazy package-root exports, shared by every Ludic package's ``__init__``.

A root writes each public name once, as an import under ``if TYPE_CHECKING:``: type checkers and IDEs
read those imports, and at runtime the root installs the hooks below, which read the same block from
the root's source (on first use, not on import) and import a name's submodule when it is first asked
for. So ``import ludic_x`` stays cheap and pulls in no optional dependency, while ``from ludic_x import
Name``, ``ludic_x.Name`` and ``ludic_x.__all__`` work as for an eager import. The hooks are installed
only when not type checking: a module-level ``__getattr__`` visible to a type checker would make it
accept any attribute of the package, typos included.
"""

from __future__ import annotations

import importlib

# Not ``typing.TYPE_CHECKING``: every package root imports this module, and ``typing`` would cost more
# to import than the root itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["lazy_attributes", "type_checking_imports"]


def type_checking_imports(source: str) -> dict[str, str]:
    """``{name: module}`` for each ``from module import name`` under the top-level ``if TYPE_CHECKING:``
    of ``source``, in the order written."""
    import ast  # only on first use of a root's names: ``import ludic_x`` never pays for it

    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return {
                alias.asname or alias.name: statement.module
                for statement in node.body
                if isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names
            }
    raise ValueError("the source has no top-level `if TYPE_CHECKING:` block of exports")


def lazy_attributes(namespace: dict[str, Any]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package root whose globals are ``namespace``.

    ``__all__`` is the root's exports followed by ``__version__``."""
    module_of: dict[str, str] = {}

    def exports() -> dict[str, str]:
        if not module_of:
            package = namespace["__name__"]
            module_of.update(type_checking_imports(namespace["__loader__"].get_source(package)))
            namespace["__all__"] = [*module_of, "__version__"]
        return module_of

    def __getattr__(name: str) -> object:
        if name == "__all__":
            exports()
            return namespace["__all__"]
        module = exports().get(name)
        if module is None:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups find it directly, without this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports(), "__all__"})

    return __getattr__, __dir__
