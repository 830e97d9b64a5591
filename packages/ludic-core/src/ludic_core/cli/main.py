"""The ``ludic`` command: subcommands contributed by the installed packages.

Each package declares its subcommands in the entry-point group ``"ludic.commands"`` (name ->
:class:`~ludic_core.cli.command.Command`): ludic-core ``envs``, ``eval`` and ``rollouts``, ludic-vllm
``serve``. A command whose package is not installed names it (``ludic serve`` needs ludic-vllm: pip
install ludic-vllm). Errors Ludic raises on purpose (a bad config, an unknown env, a server that does not
answer) print as one message and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata

from ludic_core.cli.command import Command
from ludic_core.errors import ConfigError, LudicError
from ludic_core.peak_memory import limit_malloc_arenas
from ludic_core.suggestions import did_you_mean

__all__ = ["COMMAND_GROUP", "PROVIDED_BY", "available_commands", "console_main", "main"]

COMMAND_GROUP = "ludic.commands"

PROVIDED_BY: dict[str, str] = {"serve": "ludic-vllm", "train": "ludic-train"}
"""Commands other packages contribute, for the error when the package is not installed."""


def available_commands() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=COMMAND_GROUP)}


def _load(name: str, entry_point: metadata.EntryPoint) -> Command:
    try:
        command = entry_point.load()
    except Exception as exc:
        raise ConfigError(f"`ludic {name}`: loading {entry_point.value!r} failed: {exc}") from exc
    if not isinstance(command, Command):
        raise ConfigError(f"`ludic {name}`: {entry_point.value!r} is {type(command).__name__}, not a Command")
    return command


def _top_help(commands: dict[str, metadata.EntryPoint]) -> str:
    lines = ["usage: ludic <command> [options]", "", "commands:"]
    width = max((len(name) for name in commands), default=0)
    for name in sorted(commands):
        try:
            summary = _load(name, commands[name]).help
        except ConfigError as exc:
            summary = f"(cannot be loaded: {exc})"
        lines.append(f"  {name:<{width}}  {summary}")
    missing = sorted(set(PROVIDED_BY) - set(commands))
    if missing:
        lines += ["", "not installed: " + ", ".join(f"{name} ({PROVIDED_BY[name]})" for name in missing)]
    lines += ["", "`ludic <command> --help` for a command's options."]
    return "\n".join(lines)


def _unknown(name: str, commands: dict[str, metadata.EntryPoint]) -> str:
    package = PROVIDED_BY.get(name)
    if package is not None:
        return f"`ludic {name}` needs {package}: pip install {package}"
    return (
        f"unknown command {name!r}; {did_you_mean(name, commands)}(installed: {', '.join(sorted(commands))})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = available_commands()
    if not args or args[0] in ("-h", "--help"):
        print(_top_help(commands))
        return 0
    name, rest = args[0], args[1:]
    # Before any thread allocates: with one glibc heap arena, memory that the sampler's, the event
    # loop's and torch's threads free is reused by all of them instead of each thread's arena keeping
    # its own high-water mark (a training command's resident memory then stays near its working set).
    limit_malloc_arenas()
    try:
        if name not in commands:
            raise ConfigError(_unknown(name, commands))
        command = _load(name, commands[name])
        if command.passthrough:
            return command.run(argparse.Namespace(argv=rest))
        parser = argparse.ArgumentParser(prog=f"ludic {name}", description=command.help)
        command.add_arguments(parser)
        # Intermixed: overrides may come after flags (`ludic eval tictactoe --model m episodes=5`).
        return command.run(parser.parse_intermixed_args(rest))
    except LudicError as exc:
        print(f"ludic {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ludic {name}: interrupted", file=sys.stderr)
        return 130


def console_main() -> None:
    """The console script: ``main``'s status becomes the process's exit status. A closed stdout
    (``ludic envs | head -1``) ends the command quietly, as it ends any Unix filter."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; pointing it at devnull keeps that flush from failing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)
