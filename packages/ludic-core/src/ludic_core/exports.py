"""Lazy package-root exports, shared by every Ludic package's ``__init__``.

A root lists its public names and the submodule that defines each (``module_of``); a name's submodule
is imported on first use, so ``import ludic_x`` stays cheap and pulls in no optional dependency, while
``from ludic_x import Name`` and ``ludic_x.Name`` work as for an eager import. Roots import the same
names under ``if TYPE_CHECKING:`` so type checkers and IDEs see them, and install the hooks below only
when not type checking: a module-level ``__getattr__`` visible to a type checker would make it accept
any attribute of the package, typos included.
"""

from __future__ import annotations

import importlib

# Not ``typing.TYPE_CHECKING``: every package root imports this module, and ``typing`` would cost more
# to import than the root itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, module_of: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of package ``package`` whose globals are ``namespace``."""

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups find it directly, without this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *module_of})

    return __getattr__, __dir__
