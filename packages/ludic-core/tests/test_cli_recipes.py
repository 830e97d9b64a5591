"""The recipe registry behind ``ludic recipes`` and ``ludic train``, the run defaults of envs, and the
recipe defaults layer of run configs (torch-free: no recipe here is run)."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest

from ludic_core.cli.main import main
from ludic_core.errors import ConfigError
from ludic_core.run.loading import load_config
from ludic_core.run.recipes import RECIPES, RUN_DEFAULTS, Recipe, env_run_defaults, get_recipe


@attrs.frozen(kw_only=True)
class _Inner:
    lr: float = 1.0


@attrs.frozen(kw_only=True)
class _Config:
    steps: int
    inner: _Inner = attrs.field(factory=_Inner)


def _check(config: _Config) -> None:
    if config.steps > 100:
        raise ConfigError(f"steps = {config.steps}: at most 100")


def _recipe() -> Recipe:
    return Recipe(
        summary="a test recipe",
        config_class=_Config,
        runner="builtins:print",
        checks=(f"{__name__}:_check",),
        defaults={"steps": 3, "inner": {"lr": 0.5}},
    )


@pytest.fixture
def registered() -> Iterator[str]:
    RECIPES.register("test-recipe", _recipe)
    yield "test-recipe"
    RECIPES.unregister("test-recipe")


def test_recipes_command_prints_one_line_per_recipe(
    registered: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split(None, 1) == [registered, "a test recipe"] for line in lines)


def test_get_recipe_names_the_installed_recipes(registered: str) -> None:
    assert get_recipe(registered).summary == "a test recipe"
    with pytest.raises(ConfigError, match=r"unknown recipe 'test-recipee'; did you mean 'test-recipe'\?"):
        get_recipe("test-recipee")


def test_defaults_sit_under_files_and_overrides_and_are_never_mutated(registered: str) -> None:
    recipe = get_recipe(registered)
    config = load_config(recipe.config_class, defaults=recipe.defaults, overrides=["inner.lr=0.25"])
    assert config == _Config(steps=3, inner=_Inner(lr=0.25))
    assert recipe.defaults == {"steps": 3, "inner": {"lr": 0.5}}
    recipe.validate(config)
    with pytest.raises(ConfigError, match="steps = 101: at most 100"):
        recipe.validate(load_config(_Config, defaults=recipe.defaults, overrides=["steps=101"]))


def test_runner_and_check_must_name_module_and_function() -> None:
    with pytest.raises(ConfigError, match=r"Recipe\.runner must be 'module:function'"):
        Recipe(summary="s", config_class=_Config, runner="no_colon")
    with pytest.raises(ConfigError, match=r"Recipe\.checks must be 'module:function'"):
        Recipe(summary="s", config_class=_Config, runner="m:f", checks=("m:",))


def test_each_rank_samples_whole_groups_and_the_ranks_together_sample_one_processs_step() -> None:
    from ludic_core.run.profiles import default_profile
    from ludic_core.run.rl import RLEpisodesConfig, train_requests

    config = RLEpisodesConfig(env="tictactoe", episodes=4, samples_per_prompt=3, seed=7)
    whole = train_requests(config, default_profile())(5)
    shares = [train_requests(config, default_profile(), rank=r, world_size=2)(5) for r in (0, 1)]
    assert shares[0] + shares[1] == whole  # same requests, same seeds, split in rank order
    groups = [{request.meta["group_id"] for request in share} for share in shares]
    assert [len(g) for g in groups] == [2, 2] and not groups[0] & groups[1]  # whole groups per rank
    assert train_requests(config, default_profile(), rank=1, world_size=2)(5) == shares[1]  # replayable
    with pytest.raises(ConfigError, match="episodes = 4 does not split over the 3 data-parallel ranks"):
        train_requests(config, default_profile(), rank=0, world_size=3)


def test_env_run_defaults_are_found_by_env_name_and_name_the_env_they_lack() -> None:
    from ludic_core.registry import ENVS
    from ludic_core.testing.envs import GuessNumberEnv

    with pytest.raises(ConfigError, match=r"unknown env 'no-such-env'"):
        env_run_defaults("no-such-env")
    ENVS.register("bare-env", GuessNumberEnv)
    try:
        with pytest.raises(
            ConfigError, match=r"unknown run defaults for env 'bare-env'; .*'ludic.run_defaults'"
        ):
            env_run_defaults("bare-env")
        RUN_DEFAULTS.register("bare-env", lambda: {"episodes": 3})
        assert env_run_defaults("bare-env") == {"env": "bare-env", "episodes": 3}
    finally:
        ENVS.unregister("bare-env")
        RUN_DEFAULTS.unregister("bare-env")
