"""``ludic train <recipe> [run.toml ...] [key=value ...] [--dry-run] [--resume RUN_DIR]``.

The recipe and ``backend.kind`` give the run config class and its defaults; TOML files and
``key=value`` overrides go on top, and the whole config is validated before any model loads.
``--dry-run`` prints the resolved config and builds every component without training. A run writes
``config.json``, ``versions.json`` and ``recipe.json`` to its run directory first; ``--resume RUN_DIR``
reads recipe and config back (overrides still apply), continues from the newest checkpoint and moves
the earlier leg's files to ``history/<n>/``. Under ``torchrun`` every rank resolves the same config and
joins one process group (:func:`~ludic_train.recipes.components.data_parallel`); rank 0 alone writes
the run directory and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from ludic_core.cli.command import Command
from ludic_core.errors import ConfigError
from ludic_core.run.loading import layered_value, load_config, to_json
from ludic_core.run.recipes import Recipe, get_recipe, recipe_path
from ludic_core.run.run_dir import create_run_dir

__all__ = ["COMMAND", "resolve"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="a registered recipe (see `ludic recipes`)")
    parser.add_argument(
        "rest",
        nargs="*",
        metavar="run.toml | key=value",
        help="TOML run configs (applied in order) and overrides, e.g. steps=10 trainer.lr=1e-5",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved config and build every component; no training",
    )
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint"
    )


def _split(rest: list[str]) -> tuple[list[str], list[str]]:
    files = [item for item in rest if "=" not in item]
    overrides = [item for item in rest if "=" in item]
    return files, overrides


def _recipe_of_run(run_dir: Path) -> str:
    path = recipe_path(run_dir)
    if not (run_dir / "config.json").is_file() or not path.is_file():
        raise ConfigError(
            f"--resume {str(run_dir)!r}: not a `ludic train` run directory (no config.json and recipe.json)"
        )
    name = json.loads(path.read_text())["recipe"]
    if not isinstance(name, str):
        raise ConfigError(f"{str(path)!r}: recipe must be a string, got {name!r}")
    return name


def _for_backend(recipe: Recipe, files: list[str], overrides: list[str]) -> tuple[Recipe, type]:
    """``recipe`` as run by the sampler its ``backend.kind`` names (the last layer that sets it wins),
    and its run config class."""
    kind = layered_value(("backend", "kind"), defaults=recipe.defaults, files=files, overrides=overrides)
    if kind is not None and not isinstance(kind, str):
        raise ConfigError(f"backend.kind = {kind!r}: expected the name of a registered sampler (a str)")
    resolved = recipe.for_backend(kind or "local")
    if resolved.config_class is None:
        raise ConfigError(f"recipe {recipe.summary!r} with backend.kind = {kind!r} names no run config class")
    return resolved, resolved.config_class


def resolve(args: argparse.Namespace) -> tuple[str, Recipe, Any]:
    """The recipe's name, the recipe and the validated config the arguments ask for."""
    files, overrides = _split(list(args.rest))
    if args.resume is not None:
        run_dir = Path(args.resume)
        name = _recipe_of_run(run_dir)
        if args.recipe is not None and args.recipe != name:
            # `ludic train --resume DIR steps=5`: argparse takes the first override for the recipe.
            if "=" in args.recipe:
                overrides.insert(0, args.recipe)
            elif args.recipe.endswith((".toml", ".json")):
                files.insert(0, args.recipe)
            else:
                raise ConfigError(f"--resume {str(run_dir)!r} is a {name!r} run, not {args.recipe!r}")
        files.insert(0, str(run_dir / "config.json"))
        recipe, config_class = _for_backend(get_recipe(name), files, overrides)
        config: Any = load_config(config_class, files=files, overrides=overrides)
        if Path(config.run_dir) != run_dir:
            config = attrs.evolve(config, run_dir=str(run_dir))
    else:
        if args.recipe is None:
            raise ConfigError("which recipe? `ludic train <recipe>` (`ludic recipes` lists them)")
        name = args.recipe
        recipe, config_class = _for_backend(get_recipe(name), files, overrides)
        config = load_config(config_class, defaults=recipe.defaults, files=files, overrides=overrides)
    recipe.validate(config)
    return name, recipe, config


def _new_run_dir(name: str, config: Any) -> Path:
    path = (
        Path(config.run_dir)
        if config.run_dir
        else Path("runs") / f"train-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if (path / "config.json").exists():
        raise ConfigError(
            f"run_dir {str(path)!r} already holds a run; continue it with --resume {path} or choose another run_dir"
        )
    return path


def _keep_history(run_dir: Path) -> None:
    """A resumed run may change the config (``steps=60``) and the installed versions: what the earlier
    legs ran with moves to ``history/<n>/`` rather than being overwritten."""
    history = run_dir / "history"
    leg = history / str(len(list(history.glob("*"))) if history.is_dir() else 0)
    leg.mkdir(parents=True)
    for name in ("config.json", "versions.json", "summary.json"):
        if (run_dir / name).exists():
            (run_dir / name).rename(leg / name)


def _run(args: argparse.Namespace) -> int:
    from ludic_train.recipes.components import data_parallel

    name, recipe, config = resolve(args)
    # Every rank has read the config (from the run directory too, on --resume) before the process
    # group forms, so rank 0 may write the run directory from here on.
    with data_parallel() as ranks:
        if args.dry_run:
            return _dry_run(name, recipe, config, main=ranks.main)
        return _train(name, recipe, config, resume=args.resume is not None, main=ranks.main)


def _dry_run(name: str, recipe: Recipe, config: Any, *, main: bool) -> int:
    if main:
        print(json.dumps({"recipe": name, "config": to_json(config)}, indent=2))
    runner = recipe.load_runner()
    with tempfile.TemporaryDirectory(prefix="ludic-dry-run-") as scratch:
        components = runner(config, Path(scratch), dry_run=True, resume=False)
    if main:
        for component, description in components.items():
            print(f"{component}: {description}")
        print(f"dry run of {name!r}: every component built; nothing trained", file=sys.stderr)
    return 0


def _train(name: str, recipe: Recipe, config: Any, *, resume: bool, main: bool) -> int:
    from ludic_train.recipes.components import on_main_rank

    def prepare_run_dir() -> str:
        run_dir = Path(config.run_dir) if resume else _new_run_dir(name, config)
        if resume:
            _keep_history(run_dir)
        create_run_dir("train", name, attrs.evolve(config, run_dir=str(run_dir)), str(run_dir))
        recipe_path(run_dir).write_text(json.dumps({"recipe": name}) + "\n")
        print(f"run directory: {run_dir}", file=sys.stderr)
        return str(run_dir)

    runner = recipe.load_runner()
    run_dir = Path(on_main_rank(prepare_run_dir, "preparing the run directory"))
    config = attrs.evolve(config, run_dir=str(run_dir))
    summary = runner(config, run_dir, dry_run=False, resume=resume)
    if main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        steps = summary.get("steps")
        reached = f"trained to step {steps}" if steps is not None else "finished"
        print(f"{name}: {reached}; run directory {run_dir}", file=sys.stderr)
    return 0


COMMAND = Command(
    help="train with a registered recipe: ludic train <recipe> [run.toml] key=value [--dry-run] [--resume DIR]",
    add_arguments=_add_arguments,
    run=_run,
)
