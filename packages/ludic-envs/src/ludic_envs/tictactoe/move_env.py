"""One Tic-Tac-Toe decision, paid by the move's value under perfect play."""

from __future__ import annotations

from typing import Any

from ludic_core.errors import ProtocolError
from ludic_core.types import StepOutcome
from ludic_envs.tictactoe.board import coordinate_of, index_of
from ludic_envs.tictactoe.env import TicTacToeEnv
from ludic_envs.tictactoe.solver import position_value

__all__ = ["TicTacToeMoveEnv"]


class TicTacToeMoveEnv(TicTacToeEnv):
    """The agent makes one move from the start position (``start_board``, or the empty board, or the
    opponent's opening when the agent plays O) and the episode ends. The reward is the outcome perfect
    play reaches from the position after the move: ``rewards.win`` if it keeps a forced win,
    ``rewards.unforced_draw`` for a draw, ``rewards.loss`` for a forced loss; an illegal or malformed
    move pays ``rewards.illegal_move`` as in :class:`TicTacToeEnv`.

    The prompt is the one :class:`TicTacToeEnv` shows, so a policy trained on single decisions plays
    full games unchanged. The solver grades the move, so this is a dense, verifier-style signal:
    every move is scored, not only the last one of a game. ``info`` carries ``move_value`` (+1, 0, −1)
    beside :class:`TicTacToeEnv`'s keys. Options are :class:`TicTacToeEnv`'s (the opponent only
    opens the game when the agent plays O from the empty board)."""

    def env_step(self, action: str) -> StepOutcome:
        game = self.game
        if game.is_over():
            raise ProtocolError(f"{self.name}: the episode is over; call reset() before stepping again")
        optimal_before = game.optimal_coordinates()
        index = index_of(action)
        if index is None or index not in game.board.legal_moves():
            return self._illegal(action, optimal_before, index)
        game.play(index)
        value = -position_value(game.board)  # the board's value is the opponent's, who moves next
        reward = {1: self.rewards.win, 0: self.rewards.unforced_draw, -1: self.rewards.loss}[value]
        info: dict[str, Any] = {
            **game.summary_for(self._mark),
            "move": coordinate_of(index),
            "move_was_optimal": coordinate_of(index) in optimal_before,
            "move_value": value,
            "optimal_moves": optimal_before,
            "opponent": self.opponent.name,
            "opponent_move": None,
        }
        return StepOutcome(obs=game.board.render(), reward=reward, terminated=True, info=info)
