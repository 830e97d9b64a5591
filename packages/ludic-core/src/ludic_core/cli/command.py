"""What a ``ludic`` subcommand is. Packages contribute commands through the entry-point group
``"ludic.commands"`` (name -> a :class:`Command`); a command module must import nothing heavy at module
level, since ``ludic --help`` loads every command to list it."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import attrs

__all__ = ["Command"]


@attrs.frozen
class Command:
    """``help``: one line for ``ludic --help``; ``add_arguments`` fills the subcommand's parser;
    ``run`` gets the parsed arguments and returns the exit status. ``passthrough``: the command parses
    its own arguments (a wrapper around another program's command line, such as ``ludic serve``): ``run``
    gets ``Namespace(argv=[...])`` untouched and ``add_arguments`` is not called."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    passthrough: bool = False
