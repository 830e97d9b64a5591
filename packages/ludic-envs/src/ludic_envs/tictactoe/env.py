"""Tic-Tac-Toe against a built-in opponent, as a single-agent env."""

from __future__ import annotations

import random
from typing import Any, Literal

from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError, ProtocolError
from ludic_core.types import Info, StepOutcome
from ludic_envs.tictactoe.board import (
    Board,
    Mark,
    action_text,
    check_mark,
    check_start_board,
    coordinate_of,
    index_of,
    other_mark,
)
from ludic_envs.tictactoe.game import GameEnvMixin, TicTacToeGame
from ludic_envs.tictactoe.opponents import Opponent, make_opponent
from ludic_envs.tictactoe.prompts import board_prompt, ending_text
from ludic_envs.tictactoe.rewards import TicTacToeRewards

__all__ = ["TicTacToeEnv"]


class TicTacToeEnv(GameEnvMixin, SingleAgentEnv):
    """The agent plays one game against ``opponent``; one env step is one agent move plus the reply.

    Options (all JSON-friendly, so an ``EnvSpec`` can carry them):

    * ``opponent``: ``"random"``, ``"minimax"``, ``"mixed"`` (minimax with probability
      ``optimal_prob``, else random) or any :class:`~ludic_envs.tictactoe.opponents.Opponent`;
    * ``agent_mark``: ``"X"`` (moves first), ``"O"`` (the opponent opens) or ``"random"`` (drawn per
      episode from the env's RNG);
    * ``rewards``: a :class:`TicTacToeRewards` or a dict of overrides;
    * ``show_opponent_move``: say in the observation which cell the opponent just took;
    * ``start_board``: start every episode from this position instead of the empty board (nine cells
      ``X``/``O``/``.`` in ``A1 B1 C1 A2 … C3`` order, e.g. ``"X...O...."``); the agent plays the side to
      move, so ``agent_mark`` must be that side or ``"random"``. With ``max_steps=1`` each episode scores
      one decision, which is how a fixed set of positions is evaluated against the solver
      (``info["move_was_optimal"]``);
    * ``seed``: seeds the env's own RNG; ``reset(seed=...)`` reseeds it for that episode.
    """

    def __init__(
        self,
        *,
        opponent: str | Opponent = "random",
        optimal_prob: float = 0.5,
        agent_mark: Literal["X", "O", "random"] = "X",
        rewards: TicTacToeRewards | dict[str, float] | None = None,
        show_opponent_move: bool = True,
        start_board: str | None = None,
        seed: int | None = None,
        agent_id: str = "agent_0",
    ) -> None:
        super().__init__(agent_id=agent_id)
        self.opponent = make_opponent(opponent, optimal_prob=optimal_prob)
        if agent_mark not in ("X", "O", "random"):
            raise ConfigError(f"agent_mark must be 'X', 'O' or 'random', got {agent_mark!r}")
        self.start_board = self._check_start_board(start_board, agent_mark)
        self.agent_mark_option = agent_mark
        self.rewards = TicTacToeRewards.coerce(rewards)
        self.show_opponent_move = show_opponent_move
        self._rng = random.Random(seed)
        self._game: TicTacToeGame | None = None
        self._mark: Mark = "X"

    @property
    def agent_mark(self) -> Mark:
        return self._mark

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        if seed is not None:
            self._rng = random.Random(seed)
        opponent_move = None
        if self.start_board is not None:
            self._game = TicTacToeGame(board=self.start_board)
            self._mark = self.start_board.to_move
        else:
            if self.agent_mark_option == "random":
                self._mark = self._rng.choice(("X", "O"))
            else:
                self._mark = check_mark(self.agent_mark_option, "agent_mark")
            self._game = TicTacToeGame()
            if self._mark == "O":
                opponent_move = self._opponent_plays()
        header = self._opponent_header(opponent_move)
        info = {
            **self._game.summary_for(self._mark),
            "opponent": self.opponent.name,
            "opponent_move": opponent_move,
            "optimal_moves": self._game.optimal_coordinates(),
        }
        return board_prompt(self._game.board, self._mark, header=header), info

    def env_step(self, action: str) -> StepOutcome:
        game = self.game
        if game.is_over():
            raise ProtocolError(f"{self.name}: the episode is over; call reset() before stepping again")
        optimal_before = game.optimal_coordinates()
        index = index_of(action)
        if index is None or index not in game.board.legal_moves():
            return self._illegal(action, optimal_before, index)
        game.play(index)
        return self._after_move(coordinate_of(index), optimal_before)

    def _after_move(self, move: str, optimal_before: list[str]) -> StepOutcome:
        """The step's outcome once the agent's legal ``move`` is on the board: the opponent replies."""
        game = self.game
        opponent_move = None if game.is_over() else self._opponent_plays()
        result = game.result_for(self._mark)
        info = self._move_info(move, optimal_before, opponent_move=opponent_move)
        reward = game.reward_for(self._mark, self.rewards)
        if result is not None:
            text = ending_text(result, info["forced_draw"])
            header = self._opponent_header(opponent_move)
            obs = "\n".join(p for p in (header, game.board.render(), text) if p)
            return StepOutcome(obs=obs, reward=reward, terminated=True, info=info)
        info["next_optimal_moves"] = game.optimal_coordinates()
        obs = board_prompt(game.board, self._mark, header=self._opponent_header(opponent_move))
        return StepOutcome(obs=obs, reward=reward, info=info)

    def _illegal(self, action: str, optimal_before: list[str], index: int | None) -> StepOutcome:
        game = self.game
        reason = "not a coordinate A1..C3" if index is None else f"{coordinate_of(index)} is occupied"
        game.forfeit(self._mark)
        info = self._move_info(
            action_text(action), optimal_before, move_was_optimal=False, illegal_reason=reason
        )
        obs = f"Illegal move {action_text(action)!r}: {reason}. The game is over."
        return StepOutcome(obs=obs, reward=self.rewards.illegal_move, terminated=True, info=info)

    def _move_info(self, move: str, optimal_before: list[str], **more: Any) -> dict[str, Any]:
        """The info of a step in which the agent played ``move``; ``more`` adds or overrides keys."""
        return {
            **self.game.summary_for(self._mark),
            "move": move,
            "move_was_optimal": move in optimal_before,
            "optimal_moves": optimal_before,
            "opponent": self.opponent.name,
            "opponent_move": None,
            **more,
        }

    @staticmethod
    def _check_start_board(start_board: str | None, agent_mark: str) -> Board | None:
        board = check_start_board(start_board)
        if board is not None and agent_mark not in ("random", board.to_move):
            raise ConfigError(
                f"start_board={start_board!r} has {board.to_move} to move, but agent_mark={agent_mark!r}; "
                f"pass agent_mark={board.to_move!r} or 'random'"
            )
        return board

    def _opponent_plays(self) -> str:
        game = self.game
        index = self.opponent.choose(game.board, self._rng)
        game.play(index)
        return coordinate_of(index)

    def _opponent_header(self, opponent_move: str | None) -> str:
        if opponent_move is None or not self.show_opponent_move:
            return ""
        return f"The opponent ({other_mark(self._mark)}) played {opponent_move}."
