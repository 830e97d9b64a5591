"""Training recipes: what ``ludic train <recipe>`` runs, and ``ludic recipes`` lists.

Packages register recipes by name in the entry-point group ``"ludic.recipes"`` (ludic-train the local
Tic-Tac-Toe, GSM8K and pipeline recipes, ludic-tinker the Tinker ones). A :class:`Recipe` is light data:
its run config class (an attrs class, structured by :func:`~ludic_core.cli.config.load_config`), the
recipe's own defaults for that class, and the ``"module:function"`` that runs it, imported only when the
recipe runs, so listing recipes imports no torch.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ludic_core.cli.command import Command
from ludic_core.errors import ConfigError
from ludic_core.registry import Registry
from ludic_core.suggestions import did_you_mean

__all__ = ["COMMAND", "RECIPES", "Recipe", "RecipeRun", "get_recipe", "recipe_path"]

RecipeRun = Callable[..., Mapping[str, Any]]
"""``run(config, run_dir: Path, *, dry_run: bool, resume: bool) -> summary``: a dry run builds every
component and returns one line per component; a run trains and returns what it reached."""


def _callable_path(_instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    module, sep, name = value.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"Recipe.{attribute.name} must be 'module:function', got {value!r}")


@attrs.frozen(kw_only=True)
class Recipe:
    """``summary``: one line for ``ludic recipes``; ``config_class``: the typed run config;
    ``defaults``: this recipe's values for it (a nested dict under the TOML file and the overrides);
    ``runner``: ``"module:function"`` of a :data:`RecipeRun`, imported only when the recipe runs;
    ``check``: ``"module:function"`` taking the config and raising
    :class:`~ludic_core.errors.ConfigError` for what can be refused before anything heavy is built."""

    summary: str
    config_class: type
    runner: str = attrs.field(validator=_callable_path)
    defaults: Mapping[str, Any] = attrs.field(factory=dict)
    check: str | None = attrs.field(default=None, validator=attrs.validators.optional(_callable_path))

    def load_runner(self) -> RecipeRun:
        run: RecipeRun = _import(self.runner)
        return run

    def validate(self, config: Any) -> None:
        """Run ``check`` on ``config`` (cheap: no model, no data)."""
        if self.check is not None:
            _import(self.check)(config)


def _import(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


RECIPES: Registry[Any] = Registry("recipe", "ludic.recipes")
"""Recipe name -> a callable taking no arguments and returning its :class:`Recipe`."""


def get_recipe(name: str) -> Recipe:
    """The registered recipe ``name``; an unknown one lists the installed recipes."""
    if name not in RECIPES:
        names = RECIPES.names()
        raise ConfigError(
            f"unknown recipe {name!r}; {did_you_mean(name, names)}"
            f"installed recipes: {', '.join(names) if names else 'none'} "
            "(`ludic recipes` lists them; ludic-train and ludic-tinker provide recipes)"
        )
    recipe = RECIPES.build(name)
    if not isinstance(recipe, Recipe):
        raise ConfigError(f"recipe {name!r} is registered as {type(recipe).__name__}, not a Recipe")
    return recipe


def _add_arguments(_parser: argparse.ArgumentParser) -> None:
    return None


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


COMMAND = Command(help="list the training recipes `ludic train` runs", add_arguments=_add_arguments, run=_run)


def recipe_path(run_dir: str | Path) -> Path:
    """Where a run directory records which recipe made it (read by ``ludic train --resume``)."""
    return Path(run_dir) / "recipe.json"
