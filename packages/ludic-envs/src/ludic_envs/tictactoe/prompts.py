"""Observation text shared by the single-agent and self-play envs."""

from __future__ import annotations

from ludic_envs.tictactoe.board import Board, Mark, coordinate_of

__all__ = ["SYSTEM_PROMPT", "board_prompt", "ending_text"]

SYSTEM_PROMPT = (
    "You are playing Tic-Tac-Toe on a 3x3 board. Columns are A, B, C (left to right) and rows are 1, 2, 3 "
    "(top to bottom), so A1 is the top-left cell. X moves first. Empty cells are shown as '.'. On your "
    "turn, answer with exactly one free cell, for example B2. An occupied or invalid cell loses the game."
)


def board_prompt(board: Board, mark: Mark, *, header: str = "") -> str:
    legal = ", ".join(coordinate_of(i) for i in board.legal_moves())
    parts = [header] if header else []
    parts += [f"You play {mark}.", board.render(), f"Your move ({legal})."]
    return "\n".join(parts)


def ending_text(result: str | None, forced_draw: bool | None) -> str:
    if result == "win":
        return "You won."
    if result == "loss":
        return "You lost."
    if result == "draw":
        return "Draw (the best you could get)." if forced_draw else "Draw."
    if result == "opponent_forfeit":
        return "Your opponent made an illegal move and forfeits. The game is over."
    return "The game is over."
