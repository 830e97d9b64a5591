from __future__ import annotations

import pytest

from ludic_core.testing import check_env
from ludic_envs.tictactoe import TicTacToeEnv, TicTacToeMoveEnv

# X to move with X on A1, B1 and O on A2, B2: C1 wins, C2 blocks (a draw with best play), anything
# else loses.
POSITION = "XX.OO...."


def one_move(action: str, **kwargs: object):  # type: ignore[no-untyped-def]
    env = TicTacToeMoveEnv(start_board=POSITION, **kwargs)  # type: ignore[arg-type]
    env.reset(seed=0)
    return env.step({"agent_0": action})["agent_0"]


@pytest.mark.parametrize(
    ("move", "value", "reward"),
    [("C1", 1, 1.0), ("C2", 0, 0.5), ("A3", -1, 0.0)],
)
def test_a_move_is_paid_its_value_under_perfect_play(move: str, value: int, reward: float) -> None:
    outcome = one_move(move)
    assert outcome.terminated
    assert outcome.info["move_value"] == value and outcome.reward == reward
    assert outcome.info["move_was_optimal"] is (value == 1)
    assert outcome.info["optimal_moves"] == ["C1"]


def test_a_drawn_move_pays_the_draw_reward_and_rewards_are_configurable() -> None:
    env = TicTacToeMoveEnv(rewards={"unforced_draw": 0.25})
    env.reset(seed=0)
    outcome = env.step({"agent_0": "B2"})["agent_0"]
    assert outcome.info["move_value"] == 0 and outcome.reward == 0.25
    assert outcome.info["opponent_move"] is None and outcome.info["board"] == "....X...."


def test_an_illegal_move_pays_the_illegal_reward() -> None:
    outcome = one_move("A1")
    assert outcome.terminated and outcome.reward == -1.0
    assert outcome.info["illegal_reason"] == "A1 is occupied"


def test_the_prompt_is_the_game_env_prompt() -> None:
    move_obs, _ = TicTacToeMoveEnv(start_board=POSITION).reset(seed=3)["agent_0"]
    game_obs, _ = TicTacToeEnv(start_board=POSITION).reset(seed=3)["agent_0"]
    assert move_obs == game_obs


def test_conformance_with_ludic_core_check_env() -> None:
    check_env(TicTacToeMoveEnv(start_board=POSITION))
