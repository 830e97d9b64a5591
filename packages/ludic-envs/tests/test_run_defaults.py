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
from ludic_envs.run_defaults import (
    gsm8k_run_defaults,
    sum_of_products_run_defaults,
    tictactoe_run_defaults,
    tictactoe_selfplay_run_defaults,
)

DECLARED = {
    "tictactoe": tictactoe_run_defaults,
    "gsm8k": gsm8k_run_defaults,
    "tictactoe_selfplay": tictactoe_selfplay_run_defaults,
    "sum_of_products": sum_of_products_run_defaults,
}
# Who plays each env: the run layer's protocol and agent (ludic_core.run.players).
PLAYERS = {
    "tictactoe": ("single_agent", "chat"),
    "gsm8k": ("single_agent", "chat"),
    "tictactoe_selfplay": ("multi_agent", "chat"),
    "sum_of_products": ("single_agent", "tool_chat"),
}


@pytest.mark.parametrize(("env", "declared"), DECLARED.items())
def test_registered_run_defaults_load_as_an_rl_table(env: str, declared: Callable[[], Any]) -> None:
    defaults = env_run_defaults(env)
    assert defaults == {"env": env, **declared()}
    config = load_config(RLEpisodesConfig, defaults=defaults)
    assert config.env == env and config.algorithm == "grpo" and config.samples_per_prompt == 8
    assert (config.protocol, config.agent) == PLAYERS[env]


@pytest.mark.parametrize("env", ["tictactoe", "tictactoe_selfplay", "sum_of_products"])
def test_the_env_builds_from_its_run_defaults(env: str) -> None:
    built = make_env(env, **DECLARED[env]()["env_kwargs"])
    assert built.reset(seed=0)


def test_self_play_pays_a_forfeit_as_a_win_and_otherwise_plays_the_tictactoe_game() -> None:
    selfplay, game = tictactoe_selfplay_run_defaults(), tictactoe_run_defaults()
    assert selfplay["env_kwargs"]["rewards"] == {**game["env_kwargs"]["rewards"], "opponent_forfeit": 1.0}
    assert (selfplay["system_prompt"], selfplay["sampling"]) == (game["system_prompt"], game["sampling"])
    assert selfplay["rollout"]["max_steps"] == 9  # both seats' moves
    assert selfplay["agent_kwargs"] == {"context": "latest_observation"}  # board-only prompts


def test_the_tool_task_offers_the_calculator_in_the_hermes_format() -> None:
    defaults = sum_of_products_run_defaults()
    options = defaults["agent_kwargs"]
    assert options["tools"] == ["calculator"] and options["tool_parser"] == "hermes"
    assert '"name": "calculator"' in defaults["system_prompt"]
    env = make_env("sum_of_products", **defaults["env_kwargs"])
    obs, _info = env.reset(seed=3)[env.agent_ids[0]]
    assert obs.startswith("Compute ") and obs.count("×") == 2
