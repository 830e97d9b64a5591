"""One Tic-Tac-Toe decision, paid by the move's value under perfect play."""

from __future__ import annotations

from ludic_core.types import StepOutcome
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

    def _after_move(self, move: str, optimal_before: list[str]) -> StepOutcome:
        game = self.game
        value = -position_value(game.board)  # the board's value is the opponent's, who moves next
        reward = {1: self.rewards.win, 0: self.rewards.unforced_draw, -1: self.rewards.loss}[value]
        info = self._move_info(move, optimal_before, move_value=value)
        return StepOutcome(obs=game.board.render(), reward=reward, terminated=True, info=info)
