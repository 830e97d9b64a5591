"""Check that an installed Ludic wheel is complete: what `pip install <package>` would give a user.

Run by the ``build`` nox session with the interpreter of a fresh venv that holds the package's wheel
(and what its metadata pulled in), from outside the tree::

    python tools/check_wheel.py ludic-core --src /repo/packages/ludic-core/src/ludic_core \
        --versions ludic-core=0.2.0,ludic-envs=0.1.0

Checks, one line per problem and a non-zero exit:

- every file of the source package (modules, ``py.typed``, data files) is installed, and the package
  imports from the venv, not from the tree;
- ``__version__`` equals the distribution's version;
- every Ludic distribution in the venv has the version given in ``--versions`` (the freshly built ones);
- every console script the distribution declares runs ``--help`` and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

SCRIPT_TIMEOUT_S = 120


def source_files(src: Path) -> set[str]:
    """Files of the source package, relative to its parent (``ludic_core/py.typed``), caches left out."""
    return {
        path.relative_to(src.parent).as_posix()
        for path in src.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def check(dist: str, src: Path, versions: dict[str, str]) -> list[str]:
    problems: list[str] = []
    distribution = importlib.metadata.distribution(dist)
    # What the wheel's RECORD lists and is on disk.
    installed = {path.as_posix() for path in distribution.files or () if Path(path.locate()).is_file()}
    missing = sorted(source_files(src) - installed)
    if missing:
        problems.append(f"{dist}: the wheel lacks {len(missing)} file(s) of {src}: {missing}")

    module_name = dist.replace("-", "_")
    module = importlib.import_module(module_name)
    module_file = Path(module.__file__ or "").resolve()
    if module_file.is_relative_to(src.resolve()):
        problems.append(f"{dist}: {module_name} was imported from the tree ({module_file}), not the wheel")
    if getattr(module, "__version__", None) != distribution.version:
        problems.append(
            f"{dist}: {module_name}.__version__ is {getattr(module, '__version__', None)!r}, "
            f"the distribution's version is {distribution.version!r}"
        )

    for other in importlib.metadata.distributions():
        name = other.metadata["Name"]
        if name in versions and other.version != versions[name]:
            problems.append(f"{name} {other.version} is installed, not the freshly built {versions[name]}")

    for entry_point in distribution.entry_points.select(group="console_scripts"):
        script = Path(sys.executable).parent / entry_point.name
        try:
            result = subprocess.run(
                [str(script), "--help"], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            problems.append(f"{dist}: `{entry_point.name} --help` did not run: {error}")
            continue
        if result.returncode != 0:
            problems.append(
                f"{dist}: `{entry_point.name} --help` exited {result.returncode}:\n{result.stderr[-2000:]}"
            )
        else:
            print(f"{entry_point.name} --help: ok ({len(result.stdout.splitlines())} lines)")
    return problems


def parse_versions(text: str) -> dict[str, str]:
    versions: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, separator, version = item.partition("=")
        if not separator or not name or not version:
            raise argparse.ArgumentTypeError(f"--versions item {item!r} is not NAME=VERSION")
        versions[name] = version
    return versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", help="the distribution under test, e.g. ludic-core")
    parser.add_argument("--src", type=Path, required=True, help="its source package in the tree")
    parser.add_argument("--versions", type=parse_versions, default={}, help="NAME=VERSION,...")
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        parser.error(f"--src {args.src} is not a directory")
    problems = check(args.dist, args.src, args.versions)
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    if not problems:
        print(f"{args.dist}: wheel complete")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
