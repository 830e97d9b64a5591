"""One game in progress: the board plus what rewards need to remember about it."""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

from ludic_core.errors import DataError, ProtocolError
from ludic_envs.tictactoe.board import Board, Mark, coordinate_of, other_mark
from ludic_envs.tictactoe.prompts import SYSTEM_PROMPT
from ludic_envs.tictactoe.rewards import TicTacToeRewards
from ludic_envs.tictactoe.solver import optimal_moves, position_value

__all__ = ["GameEnvMixin", "GameResult", "TicTacToeGame"]

GameResult: TypeAlias = Literal["win", "loss", "draw", "illegal_move", "opponent_forfeit"]


@attrs.define
class TicTacToeGame:
    """Board, move history, forfeits, and whether each side ever stood on a forced win."""

    board: Board = attrs.field(factory=Board)
    moves: list[str] = attrs.field(factory=list)
    forfeited_by: Mark | None = None
    had_winning_position: dict[str, bool] = attrs.field(factory=lambda: {"X": False, "O": False})

    def __attrs_post_init__(self) -> None:
        self._note_position()

    def is_over(self) -> bool:
        return self.forfeited_by is not None or self.board.over

    def _note_position(self) -> None:
        if not self.board.over and position_value(self.board) > 0:
            self.had_winning_position[self.board.to_move] = True

    def play(self, index: int) -> None:
        if self.is_over():
            raise DataError(f"the game is over (board {self.board.compact()!r}); reset the env first")
        self.board = self.board.play(index)
        self.moves.append(coordinate_of(index))
        self._note_position()

    def forfeit(self, mark: Mark) -> None:
        self.forfeited_by = mark

    def optimal_coordinates(self) -> list[str]:
        return [coordinate_of(i) for i in optimal_moves(self.board)]

    def result_for(self, mark: Mark) -> GameResult | None:
        if self.forfeited_by is not None:
            return "illegal_move" if self.forfeited_by == mark else "opponent_forfeit"
        winner = self.board.winner()
        if winner is not None:
            return "win" if winner == mark else "loss"
        if self.board.full:
            return "draw"
        return None

    def forced_draw_for(self, mark: Mark) -> bool:
        return self.result_for(mark) == "draw" and not self.had_winning_position[mark]

    def reward_for(self, mark: Mark, rewards: TicTacToeRewards) -> float:
        result = self.result_for(mark)
        if result is None:
            return rewards.step
        if result == "draw":
            return rewards.forced_draw if self.forced_draw_for(mark) else rewards.unforced_draw
        return {
            "win": rewards.win,
            "loss": rewards.loss,
            "illegal_move": rewards.illegal_move,
            "opponent_forfeit": rewards.opponent_forfeit,
        }[result]

    def summary_for(self, mark: Mark) -> dict[str, object]:
        """Info keys common to both envs, from ``mark``'s point of view."""
        result = self.result_for(mark)
        return {
            "result": result,
            "forced_draw": self.forced_draw_for(mark) if result == "draw" else None,
            "board": self.board.compact(),
            "moves": list(self.moves),
            "mark": mark,
            "opponent_mark": other_mark(mark),
        }


class GameEnvMixin:
    """What both Tic-Tac-Toe envs expose the same way: the game of the current episode and the
    system prompt."""

    _game: TicTacToeGame | None

    @property
    def suggested_sysprompt(self) -> str:
        return SYSTEM_PROMPT

    @property
    def game(self) -> TicTacToeGame:
        if self._game is None:
            raise ProtocolError(f"{type(self).__name__}: call reset() before using the game")
        return self._game
