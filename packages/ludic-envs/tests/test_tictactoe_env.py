from __future__ import annotations

import random

import attrs
import pytest

from ludic_core.errors import ConfigError, ProtocolError
from ludic_core.testing import check_env
from ludic_envs.tictactoe import Board, TicTacToeEnv, TicTacToeRewards


@attrs.frozen
class FirstFreeOpponent:
    """Deterministic: always the lowest free cell (makes games easy to script)."""

    name: str = "first_free"

    def choose(self, board: Board, rng: random.Random) -> int:
        return board.legal_moves()[0]


def play(env: TicTacToeEnv, moves: list[str]):  # type: ignore[no-untyped-def]
    outcome = None
    for move in moves:
        outcome = env.step({"agent_0": move})["agent_0"]
        if outcome.terminated:
            break
    return outcome


def test_win_pays_win_reward() -> None:
    env = TicTacToeEnv(opponent=FirstFreeOpponent())
    obs, info = env.reset(seed=0)["agent_0"]
    assert "You play X" in obs and "A1" in obs
    assert info["result"] is None and len(info["optimal_moves"]) == 9
    # X: C1, C2, C3 (column C); the opponent fills A1, B1.
    outcome = play(env, ["C1", "C2", "C3"])
    assert outcome is not None
    assert outcome.terminated and outcome.reward == 1.0
    assert outcome.info["result"] == "win" and outcome.info["board"] == "OOX..X..X"
    assert "You won" in outcome.obs


def test_loss_pays_loss_reward_and_reports_opponent_move() -> None:
    env = TicTacToeEnv(opponent=FirstFreeOpponent(), agent_mark="O")
    obs, info = env.reset()["agent_0"]
    assert info["opponent_move"] == "A1" and "played A1" in obs
    outcome = play(env, ["C3", "B3"])  # X takes A1, B1, C1.
    assert outcome is not None and outcome.terminated
    assert outcome.info["result"] == "loss" and outcome.reward == 0.0
    assert outcome.info["opponent_move"] == "C1"


@pytest.mark.parametrize("action", ["A1", "Z9", "", "B2 because"])
def test_illegal_move_ends_episode_with_penalty(action: str) -> None:
    env = TicTacToeEnv(opponent=FirstFreeOpponent(), agent_mark="O")
    env.reset()
    outcome = env.step({"agent_0": action})["agent_0"]
    assert outcome.terminated and outcome.reward == -1.0
    assert outcome.info["result"] == "illegal_move"
    assert ("occupied" if action == "A1" else "not a coordinate") in outcome.info["illegal_reason"]
    with pytest.raises(ProtocolError, match="over"):
        env.step({"agent_0": "B2"})


def test_forced_draw_against_minimax_pays_full_reward() -> None:
    rewards = TicTacToeRewards()
    env = TicTacToeEnv(opponent="minimax", seed=5)
    _, info = env.reset(seed=5)["agent_0"]
    outcome = None
    while True:
        board = Board.from_string(info["board"])
        move = info.get("next_optimal_moves", info["optimal_moves"])[0]
        assert board.to_move == "X"
        outcome = env.step({"agent_0": move})["agent_0"]
        info = outcome.info
        if outcome.terminated:
            break
    assert outcome.info["result"] == "draw" and outcome.info["forced_draw"] is True
    assert outcome.reward == rewards.forced_draw == 1.0


@attrs.define
class ScriptedOpponent:
    moves: list[str]
    name: str = "scripted"

    def choose(self, board: Board, rng: random.Random) -> int:
        from ludic_envs.tictactoe import index_of

        index = index_of(self.moves.pop(0))
        assert index is not None and index in board.legal_moves()
        return index


def test_unforced_draw_after_missing_a_win() -> None:
    env = TicTacToeEnv(opponent=ScriptedOpponent(["B1", "A2", "A3", "C3"]))
    env.reset()
    # After A1/B1, X stands on a forced win; the moves below let it slip into a draw.
    outcome = play(env, ["A1", "C1", "B2", "C2", "B3"])
    assert outcome is not None and outcome.terminated
    assert outcome.info["result"] == "draw" and outcome.info["forced_draw"] is False
    assert outcome.reward == 0.5


def test_rewards_are_configurable() -> None:
    env = TicTacToeEnv(
        opponent=ScriptedOpponent(["B1", "A2", "A3", "C3"]),
        rewards={"unforced_draw": 0.25, "step": -0.01, "illegal_move": -2.0},
    )
    env.reset()
    first = env.step({"agent_0": "A1"})["agent_0"]
    assert first.reward == -0.01 and not first.terminated
    outcome = play(env, ["C1", "B2", "C2", "B3"])
    assert outcome is not None and outcome.reward == 0.25
    env = TicTacToeEnv(rewards=TicTacToeRewards(illegal_move=-2.0))
    env.reset(seed=1)
    assert env.step({"agent_0": "nope"})["agent_0"].reward == -2.0
    with pytest.raises(ConfigError, match="unknown keys"):
        TicTacToeEnv(rewards={"victory": 1.0})
    with pytest.raises(ConfigError, match="finite"):
        TicTacToeRewards(win=float("nan"))
    with pytest.raises(ConfigError, match="agent_mark"):
        TicTacToeEnv(agent_mark="Y")  # type: ignore[arg-type]


def test_move_optimality_is_reported() -> None:
    env = TicTacToeEnv(opponent=ScriptedOpponent(["B1", "A2", "A3", "C3"]))
    env.reset()
    first = env.step({"agent_0": "A1"})["agent_0"]
    assert first.info["move_was_optimal"] is True  # every opening is optimal
    assert first.info["next_optimal_moves"]  # X stands on a forced win after A1/B1
    second = env.step({"agent_0": "C1"})["agent_0"]
    assert second.info["optimal_moves"] == first.info["next_optimal_moves"]
    assert second.info["move_was_optimal"] is ("C1" in first.info["next_optimal_moves"])


def _transcript(env: TicTacToeEnv, seed: int | None, moves: list[str]) -> list[object]:
    out: list[object] = [env.reset(seed=seed)["agent_0"]]
    for move in moves:
        if env.game.is_over():
            break
        free = _free(env)
        outcome = env.step({"agent_0": move if move in free else free[0]})["agent_0"]
        out.append((outcome.obs, outcome.reward, outcome.info))
    return out


def _free(env: TicTacToeEnv) -> list[str]:
    from ludic_envs.tictactoe import coordinate_of

    return [coordinate_of(i) for i in env.game.board.legal_moves()]


@pytest.mark.parametrize("opponent", ["random", "minimax", "mixed"])
def test_seeding_is_reproducible_and_private(opponent: str) -> None:
    moves = ["B2", "A1", "C3", "A3", "C1"]
    state = random.getstate()
    a = _transcript(TicTacToeEnv(opponent=opponent, agent_mark="random"), 11, moves)
    b = _transcript(TicTacToeEnv(opponent=opponent, agent_mark="random", seed=999), 11, moves)
    assert a == b
    # Constructor seed alone also reproduces a whole sequence of episodes.
    env1, env2 = TicTacToeEnv(opponent=opponent, seed=3), TicTacToeEnv(opponent=opponent, seed=3)
    assert [_transcript(env1, None, moves) for _ in range(3)] == [
        _transcript(env2, None, moves) for _ in range(3)
    ]
    assert random.getstate() == state, "the env touched the global random module"
    distinct = {
        repr(_transcript(TicTacToeEnv(opponent="random", agent_mark="random"), s, moves)) for s in range(20)
    }
    assert len(distinct) > 5


def test_conformance_with_ludic_core_check_env() -> None:
    check_env(
        TicTacToeEnv(opponent="mixed", agent_mark="random"), actions=[*"ABC", "A1", "B2", "C3", "b1", "x"]
    )


@pytest.mark.parametrize("action", [None, 5, 4.0, b"B2", ["B2"]], ids=repr)
def test_an_action_that_is_not_text_is_an_illegal_move(action: object) -> None:
    env = TicTacToeEnv(opponent=FirstFreeOpponent())
    env.reset(seed=0)
    outcome = env.env_step(action)  # type: ignore[arg-type]
    assert outcome.terminated and outcome.reward == TicTacToeRewards().illegal_move
    assert outcome.info["illegal_reason"] == "not a coordinate A1..C3"
    assert outcome.info["move"] == repr(action) and repr(action) in outcome.obs


@pytest.mark.parametrize("action", [None, 5])
def test_step_names_an_action_that_is_not_text(action: object) -> None:
    env = TicTacToeEnv(opponent=FirstFreeOpponent())
    env.reset(seed=0)
    with pytest.raises(ProtocolError, match=rf"action for 'agent_0' must be a str.*{action!r}"):
        env.step({"agent_0": action})  # type: ignore[dict-item]
