"""Built-in Tic-Tac-Toe opponents. Each draws from the env's ``random.Random``, never the global one."""

from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

import attrs

from ludic_core.errors import ConfigError
from ludic_envs.tictactoe.board import Board
from ludic_envs.tictactoe.solver import optimal_moves

__all__ = [
    "MinimaxOpponent",
    "MixedOpponent",
    "Opponent",
    "RandomOpponent",
    "make_opponent",
]


@runtime_checkable
class Opponent(Protocol):
    """Picks a move (cell index) on a board where the game is not over."""

    @property
    def name(self) -> str: ...

    def choose(self, board: Board, rng: random.Random) -> int: ...


@attrs.frozen
class RandomOpponent:
    """Uniform over legal moves."""

    name: str = "random"

    def choose(self, board: Board, rng: random.Random) -> int:
        return rng.choice(board.legal_moves())


@attrs.frozen
class MinimaxOpponent:
    """Perfect play; ties between equally good moves are broken at random so games vary."""

    name: str = "minimax"

    def choose(self, board: Board, rng: random.Random) -> int:
        return rng.choice(optimal_moves(board))


def _probability(_i: object, _a: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"optimal_prob must be in [0, 1], got {value!r}")


@attrs.frozen
class MixedOpponent:
    """Plays the minimax move with probability ``optimal_prob``, else a uniformly random move."""

    optimal_prob: float = attrs.field(converter=float, validator=_probability)
    name: str = "mixed"

    def choose(self, board: Board, rng: random.Random) -> int:
        if rng.random() < self.optimal_prob:
            return MinimaxOpponent().choose(board, rng)
        return RandomOpponent().choose(board, rng)


def make_opponent(spec: str | Opponent, *, optimal_prob: float = 0.5) -> Opponent:
    """``"random"``, ``"minimax"``, ``"mixed"`` (uses ``optimal_prob``), or an :class:`Opponent`."""
    if isinstance(spec, Opponent):
        return spec
    if spec == "random":
        return RandomOpponent()
    if spec == "minimax":
        return MinimaxOpponent()
    if spec == "mixed":
        return MixedOpponent(optimal_prob)
    raise ConfigError(f"opponent must be 'random', 'minimax', 'mixed' or an Opponent, got {spec!r}")
