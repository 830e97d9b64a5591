"""Which package a release tag publishes: ``ludic-core-v0.2.0`` -> ludic-core at version 0.2.0.

The release workflow (.github/workflows/release.yml) runs this on the pushed tag before building
anything; it fails, naming the tag, when the tag does not have the form ``<package>-v<version>``, names
no package under packages/, or names a version other than the one in that package's pyproject.toml
(or in its ``__version__``). On success it prints ``package=...`` and ``version=...`` lines, the format
of ``$GITHUB_OUTPUT``::

    python tools/release_tag.py ludic-core-v0.2.0 >> "$GITHUB_OUTPUT"

Standard library only: the workflow runs it before installing anything.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_DIR = ROOT / "packages"
# `ludic-core-v0.2.0`: the package name, `-v`, then the version (PEP 440 public versions: digits and dots
# with an optional pre-, post- or dev-release suffix).
TAG_PATTERN = re.compile(
    r"^(?P<package>ludic-[a-z]+)-v(?P<version>\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?)$"
)


class ReleaseTagError(ValueError):
    """A tag that names no releasable package version."""


@dataclass(frozen=True)
class ReleaseTarget:
    package: str
    version: str


def known_packages(packages_dir: Path = PACKAGES_DIR) -> list[str]:
    return sorted(path.parent.name for path in packages_dir.glob("*/pyproject.toml"))


def declared_version(package: str, packages_dir: Path = PACKAGES_DIR) -> str:
    with (packages_dir / package / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    if project.get("name") != package:
        raise ReleaseTagError(
            f"packages/{package}/pyproject.toml names the distribution {project.get('name')!r}, not {package!r}"
        )
    version = project.get("version")
    if not isinstance(version, str):
        raise ReleaseTagError(f"packages/{package}/pyproject.toml has no static `version` (got {version!r})")
    return version


def module_version(package: str, packages_dir: Path = PACKAGES_DIR) -> str | None:
    """The ``__version__ = "..."`` of the package's ``__init__.py``, or None when it sets none."""
    init = packages_dir / package / "src" / package.replace("-", "_") / "__init__.py"
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def parse_tag(tag: str, packages_dir: Path = PACKAGES_DIR) -> ReleaseTarget:
    """The package and version ``tag`` releases; :class:`ReleaseTagError` naming the problem otherwise."""
    match = TAG_PATTERN.match(tag)
    if match is None:
        raise ReleaseTagError(
            f"release tag {tag!r} does not have the form <package>-v<version> (e.g. ludic-core-v0.2.0)"
        )
    package, version = match["package"], match["version"]
    packages = known_packages(packages_dir)
    if package not in packages:
        raise ReleaseTagError(
            f"release tag {tag!r} names package {package!r}, which is not one of {packages}"
        )
    declared = declared_version(package, packages_dir)
    if version != declared:
        raise ReleaseTagError(
            f"release tag {tag!r} names version {version!r}, but packages/{package}/pyproject.toml "
            f"declares version {declared!r}: bump the version there (and its CHANGELOG) first"
        )
    in_module = module_version(package, packages_dir)
    if in_module is not None and in_module != declared:
        raise ReleaseTagError(
            f"release tag {tag!r}: {package.replace('-', '_')}.__version__ is {in_module!r} but "
            f"pyproject.toml declares {declared!r}; make them equal"
        )
    return ReleaseTarget(package=package, version=version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag", help="the pushed tag, e.g. ludic-core-v0.2.0 ($GITHUB_REF_NAME)")
    args = parser.parse_args(argv)
    try:
        target = parse_tag(args.tag)
    except ReleaseTagError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"package={target.package}")
    print(f"version={target.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
