"""The file system a sandboxed run sees: built from nothing, not masked.

Each run's root is an empty tmpfs of ``SandboxLimits.tmpfs_bytes`` (its whole writable space) holding
only read-only binds, at their host paths, of what the interpreter needs (``/usr`` and the merged-``/usr``
links, the loader's ``/etc`` files, the interpreter's prefix and virtual environment), the harmless
``/dev`` nodes, empty ``/tmp`` and ``/dev/shm``, and the run directory owned by the run's uid. There is no
``/proc``, ``/sys``, ``/run``, ``/home`` or ``/var``, so a host path or socket outside the binds does not
exist inside; Unix sockets under the binds that ``/proc/net/unix`` lists are masked. The launcher
(:mod:`._launcher`) builds it and ``pivot_root`` s into it. The spec is computed once per pool.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

__all__ = ["DEVICES", "RootSpec", "root_spec"]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
DEVICES = ("null", "zero", "full", "random", "urandom")


@attrs.frozen
class RootSpec:
    """What a run's root holds besides its own directory (see the module docstring)."""

    read_only: tuple[str, ...]
    """Host paths bound read-only at the same path."""
    symlinks: tuple[tuple[str, str], ...] = ()
    """``(path, target)``: top-level symlinks recreated as they are on the host."""

    def to_config(self) -> dict[str, Any]:
        return {"read_only": list(self.read_only), "symlinks": [list(link) for link in self.symlinks]}


def _under(path: str, parents: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def interpreter_prefixes(interpreter: str) -> list[str]:
    """The directories an interpreter runs from: the prefix of the path it is called by (a virtual
    environment, whose ``pyvenv.cfg`` sits there) and of the file it resolves to (the base
    installation with the standard library)."""
    prefixes = []
    for executable in (os.path.abspath(interpreter), os.path.realpath(interpreter)):
        bin_dir = os.path.dirname(executable)
        prefix = os.path.dirname(bin_dir) if os.path.basename(bin_dir) == "bin" else bin_dir
        if prefix not in prefixes:
            prefixes.append(prefix)
    return prefixes


def root_spec(interpreter: str) -> RootSpec:
    """The root for runs of ``interpreter`` on this host."""
    read_only: list[str] = []
    symlinks: list[tuple[str, str]] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            symlinks.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            read_only.append(path)
    read_only += [path for path in SYSTEM_FILES if os.path.exists(path)]
    for prefix in interpreter_prefixes(interpreter):
        if os.path.realpath(prefix) == "/":
            continue  # an interpreter in /bin of a non-merged system: /bin is bound already
        if not _under(os.path.realpath(prefix), [os.path.realpath(p) for p in read_only]):
            read_only.append(prefix)
    return RootSpec(read_only=tuple(read_only), symlinks=tuple(symlinks))
