from __future__ import annotations

import random

import pytest

from ludic_envs.tictactoe import (
    COORDINATES,
    Board,
    MinimaxOpponent,
    MixedOpponent,
    RandomOpponent,
    TicTacToeEnv,
    optimal_moves,
)


def _minimax_never_loses(board: Board, bot: str) -> int:
    """Walk every line of play: all agent moves, every move the minimax bot may choose. Returns
    the number of finished games and fails on any game the bot loses."""
    if board.over:
        assert board.winner() != ("O" if bot == "X" else "X"), f"minimax lost: {board.compact()}"
        return 1
    if board.to_move == bot:
        children = [board.play(i) for i in optimal_moves(board)]
    else:
        children = [board.play(i) for i in board.legal_moves()]
    return sum(_minimax_never_loses(child, bot) for child in children)


@pytest.mark.parametrize("bot", ["X", "O"])
def test_minimax_never_loses_from_any_opening(bot: str) -> None:
    games = _minimax_never_loses(Board(), bot)
    assert games > 100  # the tree really branches


@pytest.mark.parametrize("opening", COORDINATES)
def test_minimax_env_never_pays_a_win_after_any_opening(opening: str) -> None:
    # Through the env: the agent opens on every cell and then plays at random, for many seeds.
    for seed in range(15):
        env = TicTacToeEnv(opponent="minimax", seed=seed)
        env.reset(seed=seed)
        rng = random.Random(seed)
        outcome = env.step({"agent_0": opening})["agent_0"]
        while not outcome.terminated:
            free = [COORDINATES[i] for i in env.game.board.legal_moves()]
            outcome = env.step({"agent_0": rng.choice(free)})["agent_0"]
        assert outcome.info["result"] in {"draw", "loss"}


def test_minimax_breaks_ties_with_the_env_rng() -> None:
    board = Board()
    picks = {MinimaxOpponent().choose(board, random.Random(s)) for s in range(50)}
    assert picks == set(optimal_moves(board))


def test_mixed_opponent_follows_its_probability() -> None:
    # A position where exactly one of the 7 free moves is optimal (blocking C1).
    board = Board.from_string("XX..O....")
    assert optimal_moves(board) == (2,)
    rng = random.Random(0)
    assert all(MixedOpponent(1.0).choose(board, rng) == 2 for _ in range(200))
    n = 4000
    share_random = sum(RandomOpponent().choose(board, rng) == 2 for _ in range(n)) / n
    share_mixed = sum(MixedOpponent(0.5).choose(board, rng) == 2 for _ in range(n)) / n
    # Random finds the block 1/6 of the time; mixed(0.5) 0.5 + 0.5/6 ≈ 0.583.
    assert abs(share_random - 1 / 6) < 0.03
    assert abs(share_mixed - (0.5 + 0.5 / 6)) < 0.04


def test_random_opponent_loses_to_perfect_play_sometimes() -> None:
    wins = 0
    for seed in range(40):
        env = TicTacToeEnv(opponent="random", seed=seed)
        _, info = env.reset()["agent_0"]
        while True:
            outcome = env.step({"agent_0": info.get("next_optimal_moves", info["optimal_moves"])[0]})[
                "agent_0"
            ]
            info = outcome.info
            if outcome.terminated:
                break
        assert info["result"] in {"win", "draw"}
        wins += info["result"] == "win"
    assert wins > 20
