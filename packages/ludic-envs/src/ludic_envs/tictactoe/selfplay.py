"""Two-player Tic-Tac-Toe for self-play through ``MultiAgentProtocol``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ludic_core.env import LudicEnv
from ludic_core.errors import ProtocolError
from ludic_core.types import Info, StepOutcome
from ludic_core.validation import check_bool
from ludic_envs.tictactoe.board import (
    Mark,
    action_text,
    check_start_board,
    coordinate_of,
    index_of,
    other_mark,
)
from ludic_envs.tictactoe.game import GameEnvMixin, TicTacToeGame
from ludic_envs.tictactoe.prompts import board_prompt, ending_text
from ludic_envs.tictactoe.rewards import TicTacToeRewards

__all__ = ["TicTacToeSelfPlayEnv"]

_MARK_OF: dict[str, Mark] = {"x": "X", "o": "O"}


class TicTacToeSelfPlayEnv(GameEnvMixin, LudicEnv[str]):
    """Agents ``"x"`` and ``"o"`` alternate; ``active_agents`` is the player to move (empty when over).

    Every step returns an outcome for both players, since the board changed for both: the mover gets
    its move's reward, the other player the new board and (when the move ended the game) its own
    terminal reward, so the loser learns it lost on the winner's move. An illegal move ends the game:
    the mover gets ``rewards.illegal_move``, the other ``rewards.opponent_forfeit``.

    ``start_board`` (nine cells, ``"X.O......"``) starts every game from that position, the player to
    move first; ``show_opponent_move=False`` leaves the "X played B2." line out of the board prompt, so
    that a player sees exactly the prompt of :class:`~ludic_envs.tictactoe.TicTacToeEnv` with the same
    option (a policy trained on one plays the other).

    The env is deterministic (no randomness at all); ``reset(seed=...)`` is accepted for the contract.
    """

    def __init__(
        self,
        *,
        rewards: TicTacToeRewards | dict[str, float] | None = None,
        show_opponent_move: bool = True,
        start_board: str | None = None,
    ) -> None:
        self.rewards = TicTacToeRewards.coerce(rewards)
        check_bool("TicTacToeSelfPlayEnv.show_opponent_move", show_opponent_move)
        self.show_opponent_move = show_opponent_move
        self.start_board = check_start_board(start_board)
        self._game: TicTacToeGame | None = None

    @property
    def agent_ids(self) -> list[str]:
        return ["x", "o"]

    @property
    def active_agents(self) -> list[str]:
        if self._game is None or self._game.is_over():
            return []
        return [self._game.board.to_move.lower()]

    def reset(self, *, seed: int | None = None) -> dict[str, tuple[str, Info]]:
        self._game = TicTacToeGame() if self.start_board is None else TicTacToeGame(board=self.start_board)
        board = self._game.board
        mover = board.to_move
        waiter = other_mark(mover)
        first = "moves first" if self.start_board is None else "moves next"
        return {
            mover.lower(): (
                board_prompt(board, mover),
                {**self._game.summary_for(mover), "optimal_moves": self._game.optimal_coordinates()},
            ),
            waiter.lower(): (
                f"You play {waiter}. {mover} {first}.\n{board.render()}\nWait for {mover}'s move.",
                {**self._game.summary_for(waiter), "optimal_moves": []},
            ),
        }

    def step(self, actions: Mapping[str, str]) -> dict[str, StepOutcome]:
        game = self.game
        if game.is_over():
            raise ProtocolError(f"{self.name}: the game is over; call reset() before stepping again")
        mover = game.board.to_move.lower()
        if set(actions) != {mover}:
            raise ProtocolError(f"{self.name}: it is {mover!r}'s turn; got actions for {sorted(actions)}")
        action = actions[mover]
        mover_mark = _MARK_OF[mover]
        waiter_mark = other_mark(mover_mark)
        waiter = waiter_mark.lower()
        optimal_before = game.optimal_coordinates()
        index = index_of(action)
        move_info: dict[str, Any] = {"move": action_text(action), "optimal_moves": optimal_before}
        if index is None or index not in game.board.legal_moves():
            reason = "not a coordinate A1..C3" if index is None else f"{coordinate_of(index)} is occupied"
            game.forfeit(mover_mark)
            move_info.update(move_was_optimal=False, illegal_reason=reason)
            mover_obs = f"Illegal move {action_text(action)!r}: {reason}. The game is over."
            waiter_obs = f"{mover_mark} made an illegal move ({reason}). " + ending_text(
                "opponent_forfeit", None
            )
        else:
            move = coordinate_of(index)
            game.play(index)
            move_info.update(move=move, move_was_optimal=move in optimal_before)
            header = f"{mover_mark} played {move}."
            if game.is_over():
                mover_obs = self._final_obs(header, mover_mark)
                waiter_obs = self._final_obs(header, waiter_mark)
            else:
                mover_obs = f"You play {mover_mark}.\n{game.board.render()}\nWait for {waiter_mark}'s move."
                shown = header if self.show_opponent_move else ""
                waiter_obs = board_prompt(game.board, waiter_mark, header=shown)
        done = game.is_over()
        return {
            mover: StepOutcome(
                obs=mover_obs,
                reward=game.reward_for(mover_mark, self.rewards),
                terminated=done,
                info={**game.summary_for(mover_mark), **move_info},
            ),
            waiter: StepOutcome(
                obs=waiter_obs,
                reward=game.reward_for(waiter_mark, self.rewards) if done else 0.0,
                terminated=done,
                info={
                    **game.summary_for(waiter_mark),
                    "opponent_move": move_info["move"],
                    "optimal_moves": [] if done else game.optimal_coordinates(),
                },
            ),
        }

    def _final_obs(self, header: str, mark: Mark) -> str:
        game = self.game
        result = game.result_for(mark)
        return "\n".join((header, game.board.render(), ending_text(result, game.forced_draw_for(mark))))
