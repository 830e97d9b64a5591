"""Training recipes (entry-point group ``"ludic.recipes"``): what ``ludic train <recipe>`` runs. A
recipe's name says what is trained, not where: ``backend.kind`` names the sampler
(:mod:`ludic_core.run.samplers`) that brings the run config class, runner and checks, unless the recipe
fixes them (SFT, offline RL). Runners and checks are imported only when the recipe runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.registry import ENVS, Registry
from ludic_core.run.loading import merged
from ludic_core.run.samplers import _import_path, get_sampler, import_path
from ludic_core.suggestions import did_you_mean

__all__ = [
    "RECIPES",
    "RENAMED",
    "RUN_DEFAULTS",
    "Recipe",
    "RecipeRun",
    "env_run_defaults",
    "get_recipe",
    "recipe_path",
]

RecipeRun = Callable[..., Mapping[str, Any]]
"""``run(config, run_dir: Path, *, dry_run: bool, resume: bool) -> summary``: a dry run builds every
component and returns one line per component; a run trains and returns what it reached."""

RENAMED = {
    f"{recipe}-{kind}": (recipe, kind)
    for recipe in ("tictactoe-grpo", "gsm8k-grpo")
    for kind in ("vllm", "tinker")
}
"""Recipe names that named the backend, and the recipe and ``backend.kind`` they are now."""


@attrs.frozen(kw_only=True)
class Recipe:
    """``defaults``: this recipe's values for its run config, under the TOML files and overrides;
    ``runner`` (a :data:`RecipeRun`) and ``checks`` (refusing a config before anything heavy is built):
    ``"module:function"`` paths. Without ``config_class``, the sampler that ``backend.kind`` names
    brings all three (:meth:`for_backend`), its defaults under these and ``backend_defaults[kind]``."""

    summary: str
    config_class: type | None = None
    runner: str | None = attrs.field(default=None, validator=_import_path)
    checks: tuple[str, ...] = attrs.field(default=(), validator=_import_path)
    defaults: Mapping[str, Any] = attrs.field(factory=dict)
    backend_defaults: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    def for_backend(self, kind: str) -> Recipe:
        """This recipe as run by sampler ``kind`` (itself when it fixes its config class)."""
        if self.config_class is not None:
            return self
        sampler, runs_on = get_sampler(kind)
        own = self.backend_defaults.get(kind, self.backend_defaults.get(sampler.extends or kind, {}))
        return Recipe(
            summary=self.summary,
            config_class=runs_on.config_class,
            runner=runs_on.runner,
            checks=runs_on.checks,
            defaults=merged(
                runs_on.defaults, sampler.defaults, self.defaults, own, {"backend": {"kind": kind}}
            ),
        )

    def load_runner(self) -> RecipeRun:
        if self.runner is None:
            raise ConfigError(f"recipe {self.summary!r}: resolve its backend first (Recipe.for_backend)")
        run: RecipeRun = import_path(self.runner)
        return run

    def validate(self, config: Any) -> None:
        """Run ``checks`` on ``config`` (cheap: no model, no data)."""
        for check in self.checks:
            import_path(check)(config)


RECIPES: Registry[Any] = Registry("recipe", "ludic.recipes")
"""Recipe name -> a callable taking no arguments and returning its :class:`Recipe`."""


RUN_DEFAULTS: Registry[Any] = Registry("run defaults for env", "ludic.run_defaults")
"""Env name -> a callable taking no arguments and returning the run-config values every training recipe
on that env starts from (system prompt, ``env_kwargs``, sampling, group sizes), declared with the env."""


def env_run_defaults(env: str) -> dict[str, Any]:
    """``env``'s registered run defaults and ``env`` itself; refused, naming ``env``, if either is missing."""
    if env not in ENVS:
        raise ConfigError(ENVS.unknown(env))
    return {"env": env, **RUN_DEFAULTS.build(env)}


def get_recipe(name: str) -> Recipe:
    """The registered recipe ``name``; an unknown one lists the installed recipes."""
    if name in RENAMED:
        recipe, kind = RENAMED[name]
        raise ConfigError(f"recipe {name!r} was renamed: use `ludic train {recipe} backend.kind={kind}`")
    if name not in RECIPES:
        names = RECIPES.names()
        raise ConfigError(
            f"unknown recipe {name!r}; {did_you_mean(name, names)}"
            f"installed recipes: {', '.join(names) if names else 'none'} "
            "(`ludic recipes` lists them; ludic-train provides recipes)"
        )
    recipe = RECIPES.build(name)
    if not isinstance(recipe, Recipe):
        raise ConfigError(f"recipe {name!r} is registered as {type(recipe).__name__}, not a Recipe")
    return recipe


def recipe_path(run_dir: str | Path) -> Path:
    """Where a run directory records which recipe made it (read by ``ludic train --resume``)."""
    return Path(run_dir) / "recipe.json"
