"""``ludic envs``: the registered envs, one line each (the first line of the factory's docstring), and
whether ``ludic eval`` has an eval profile for them."""

from __future__ import annotations

import argparse
import inspect

from ludic_core.cli.command import Command
from ludic_core.errors import RegistryError
from ludic_core.registry import ENVS
from ludic_core.run.profiles import EVAL_PROFILES

__all__ = ["COMMAND", "describe_env", "run"]


def describe_env(name: str) -> str:
    """The first docstring line of the env's factory, or why it cannot be loaded."""
    try:
        factory = ENVS.get(name)
    except RegistryError as exc:  # a broken entry point must not hide the others
        return f"(cannot be loaded: {exc})"
    doc = " ".join((inspect.getdoc(factory) or "").split("\n\n")[0].split())
    sentence_end = doc.find(". ")
    return doc if sentence_end < 0 else doc[: sentence_end + 1]


def run(args: argparse.Namespace) -> int:
    names = ENVS.names()
    if not names:
        print("no envs registered; pip install ludic-envs for Tic-Tac-Toe, GSM8K, MATH, code execution")
        return 0
    width = max(len(name) for name in names)
    profiled = set(EVAL_PROFILES.names())
    for name in names:
        mark = "*" if name in profiled else " "
        print(f"{name:<{width}} {mark} {describe_env(name)}")
    print("\n* has an eval profile (parser, outcomes) for `ludic eval`; others use the generic one")
    return 0


COMMAND = Command(help="list the registered envs, one line each", add_arguments=lambda _parser: None, run=run)
