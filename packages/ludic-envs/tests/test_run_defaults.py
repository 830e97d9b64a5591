"""The run defaults of this package's envs, found by env name through the registry
(``ludic.run_defaults``): each is a valid RL table of a run config, and its env builds from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ludic_core.registry import make_env
from ludic_core.run.loading import load_config
from ludic_core.run.recipes import env_run_defaults
from ludic_core.run.rl import RLEpisodesConfig
from ludic_envs.run_defaults import gsm8k_run_defaults, tictactoe_run_defaults


@pytest.mark.parametrize(
    ("env", "declared"), [("tictactoe", tictactoe_run_defaults), ("gsm8k", gsm8k_run_defaults)]
)
def test_registered_run_defaults_load_as_an_rl_table(env: str, declared: Callable[[], Any]) -> None:
    defaults = env_run_defaults(env)
    assert defaults == {"env": env, **declared()}
    config = load_config(RLEpisodesConfig, defaults=defaults)
    assert config.env == env and config.algorithm == "grpo" and config.samples_per_prompt == 8


def test_tictactoe_env_builds_from_its_run_defaults() -> None:
    env = make_env("tictactoe", **tictactoe_run_defaults()["env_kwargs"])
    assert env.reset(seed=0)
