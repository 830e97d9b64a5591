"""``ludic recipes``: the registered training recipes, one line each."""

from __future__ import annotations

import argparse

from ludic_core.cli.command import Command
from ludic_core.run.recipes import RECIPES, get_recipe

__all__ = ["COMMAND"]


def _run(_args: argparse.Namespace) -> int:
    names = RECIPES.names()
    if not names:
        print(
            "no recipes installed (`ludic train` and its recipes come with ludic-train: pip install ludic-train)"
        )
        return 0
    width = max(len(name) for name in names)
    for name in names:
        try:
            summary = get_recipe(name).summary
        except Exception as exc:  # one broken plug-in must not hide the others
            summary = f"(cannot be loaded: {exc})"
        print(f"{name:<{width}}  {summary}")
    return 0


COMMAND = Command(
    help="list the training recipes `ludic train` runs", add_arguments=lambda _parser: None, run=_run
)
