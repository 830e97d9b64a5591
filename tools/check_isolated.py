"""Check one Ludic package installed from its wheel, alone, in a fresh virtual environment.

Run by the ``isolated`` nox session with the venv's own interpreter::

    python tools/check_isolated.py ludic_core --forbid-modules torch,transformers \
        --allow-dists ludic-core,attrs,structlog,typing-extensions

It imports every module of the package (``pkgutil.walk_packages``) and loads every entry point the
distribution declares in a ``ludic.*`` group (the registry's envs, protocols and agents), then checks
that none of the ``--forbid-modules`` was imported along the way, and that the environment holds no
distribution outside ``--allow-dists`` (when given). Exits non-zero with one line per problem.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import re
import sys
import traceback

# Installed by venv/virtualenv themselves, not by the package under test.
VENV_BOOTSTRAP_DISTS = frozenset({"pip", "setuptools", "wheel"})


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split_csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _needs_an_extra(exc: BaseException) -> bool:
    """A module whose import raises ``MissingExtraError`` reports an uninstalled extra the way Ludic
    promises (naming the ``pip install`` line): that is a pass, not a failure."""
    return any(type(e).__name__ == "MissingExtraError" for e in (exc, exc.__cause__) if e is not None)


def import_all(package_name: str) -> tuple[list[str], list[str]]:
    """Import the package and every submodule; return (imported, failures).

    Modules that need an extra say so with ``MissingExtraError``; they are listed, not failed."""
    failures: list[str] = []
    imported: list[str] = []
    try:
        package = importlib.import_module(package_name)
    except Exception:
        return imported, [f"import {package_name} failed:\n{traceback.format_exc()}"]
    imported.append(package_name)

    def on_error(name: str) -> None:
        exc = sys.exc_info()[1]
        if exc is not None and _needs_an_extra(exc):
            print(f"{name}: needs an extra ({exc})")
            return
        failures.append(f"import {name} failed (while walking packages):\n{traceback.format_exc()}")

    for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}.", onerror=on_error):
        try:
            importlib.import_module(module.name)
        except Exception as exc:
            if _needs_an_extra(exc):
                print(f"{module.name}: needs an extra ({exc})")
                continue
            failures.append(f"import {module.name} failed:\n{traceback.format_exc()}")
        else:
            imported.append(module.name)
    return imported, failures


def load_entry_points(package_name: str) -> tuple[list[str], list[str]]:
    """Load the distribution's entry points in ``ludic.*`` groups; return (loaded, failures)."""
    distribution = importlib.metadata.distribution(package_name.replace("_", "-"))
    loaded: list[str] = []
    failures: list[str] = []
    for entry_point in distribution.entry_points:
        if not entry_point.group.startswith("ludic."):
            continue
        label = f"{entry_point.group}:{entry_point.name} = {entry_point.value}"
        try:
            entry_point.load()
        except Exception:
            failures.append(f"entry point {label} failed to load:\n{traceback.format_exc()}")
        else:
            loaded.append(label)
    return loaded, failures


def forbidden_loaded(forbidden: list[str]) -> list[str]:
    """Top-level names in ``forbidden`` that are now in sys.modules (including any submodule)."""
    loaded_tops = {name.partition(".")[0] for name in sys.modules}
    return sorted(name for name in forbidden if name in loaded_tops)


def unexpected_dists(allowed: list[str]) -> list[str]:
    allowed_canonical = {canonical(name) for name in allowed} | VENV_BOOTSTRAP_DISTS
    installed = {
        canonical(dist.metadata["Name"]): dist.version
        for dist in importlib.metadata.distributions()
        if dist.metadata["Name"]
    }
    return sorted(
        f"{name}=={version}" for name, version in installed.items() if name not in allowed_canonical
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", help="import name, e.g. ludic_core")
    parser.add_argument(
        "--forbid-modules",
        default="",
        help="comma-separated top-level modules that importing the package must not load",
    )
    parser.add_argument(
        "--allow-dists",
        default=None,
        help="comma-separated distributions the environment may hold (pip/setuptools/wheel always allowed)",
    )
    args = parser.parse_args(argv)

    imported, problems = import_all(args.package)
    print(f"{args.package}: imported {len(imported)} module(s): {', '.join(imported)}")
    entry_points, entry_point_problems = load_entry_points(args.package)
    problems.extend(entry_point_problems)
    print(f"{args.package}: loaded {len(entry_points)} ludic.* entry point(s): {', '.join(entry_points)}")

    forbidden = split_csv(args.forbid_modules)
    if forbidden:
        loaded = forbidden_loaded(forbidden)
        if loaded:
            problems.append(f"importing {args.package} loaded forbidden module(s): {', '.join(loaded)}")
        else:
            print(f"{args.package}: none of {', '.join(forbidden)} was imported")

    if args.allow_dists is not None:
        extra = unexpected_dists(split_csv(args.allow_dists))
        if extra:
            problems.append(
                f"the environment holds distribution(s) outside the allowed set: {', '.join(extra)}"
            )
        else:
            print(f"{args.package}: environment holds only the allowed distributions")

    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
