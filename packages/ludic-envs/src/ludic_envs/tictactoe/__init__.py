"""Tic-Tac-Toe: against a built-in opponent (:class:`TicTacToeEnv`), one decision graded by the solver
(:class:`TicTacToeMoveEnv`) and two-player self-play (:class:`TicTacToeSelfPlayEnv`)."""

from ludic_envs.tictactoe.board import COORDINATES, Board, check_start_board, coordinate_of, index_of
from ludic_envs.tictactoe.env import TicTacToeEnv
from ludic_envs.tictactoe.game import TicTacToeGame
from ludic_envs.tictactoe.move_env import TicTacToeMoveEnv
from ludic_envs.tictactoe.opponents import (
    MinimaxOpponent,
    MixedOpponent,
    Opponent,
    RandomOpponent,
    make_opponent,
)
from ludic_envs.tictactoe.rewards import TicTacToeRewards
from ludic_envs.tictactoe.selfplay import TicTacToeSelfPlayEnv
from ludic_envs.tictactoe.solver import optimal_moves, position_value

__all__ = [
    "COORDINATES",
    "Board",
    "MinimaxOpponent",
    "MixedOpponent",
    "Opponent",
    "RandomOpponent",
    "TicTacToeEnv",
    "TicTacToeGame",
    "TicTacToeMoveEnv",
    "TicTacToeRewards",
    "TicTacToeSelfPlayEnv",
    "check_start_board",
    "coordinate_of",
    "index_of",
    "make_opponent",
    "optimal_moves",
    "position_value",
]
