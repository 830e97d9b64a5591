"""Perfect play by minimax. Tic-Tac-Toe has 5,478 reachable positions, so every value is cached."""

from __future__ import annotations

from functools import lru_cache

from ludic_envs.tictactoe.board import Board

__all__ = ["optimal_moves", "position_value"]


@lru_cache(maxsize=8192)
def position_value(board: Board) -> int:
    """The game-theoretic value for the player to move: +1 forced win, 0 draw, −1 forced loss."""
    winner = board.winner()
    if winner is not None:
        # The previous player just completed a line.
        return 1 if winner == board.to_move else -1
    if board.full:
        return 0
    return max(-position_value(board.play(i)) for i in board.legal_moves())


@lru_cache(maxsize=8192)
def optimal_moves(board: Board) -> tuple[int, ...]:
    """Every move that keeps the best achievable value for the player to move (cell indices, sorted)."""
    moves = board.legal_moves()
    if not moves:
        return ()
    values = {i: -position_value(board.play(i)) for i in moves}
    best = max(values.values())
    return tuple(i for i in moves if values[i] == best)
