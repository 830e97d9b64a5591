"""Reward table for Tic-Tac-Toe (defaults as in the original Ludic env)."""

from __future__ import annotations

import math

import attrs

from ludic_core.errors import ConfigError

__all__ = ["TicTacToeRewards"]


def _finite(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(f"TicTacToeRewards.{attribute.name} must be finite, got {value!r}")


@attrs.frozen
class TicTacToeRewards:
    """What each episode ending pays the agent.

    A draw is *forced* when the agent never had a winning position (minimax) at any of its turns: it
    drew a game it could not have won, which is the best possible play against a perfect opponent. A
    draw after the agent let a forced win slip is an *unforced* draw.
    """

    win: float = attrs.field(default=1.0, converter=float, validator=_finite)
    forced_draw: float = attrs.field(default=1.0, converter=float, validator=_finite)
    unforced_draw: float = attrs.field(default=0.5, converter=float, validator=_finite)
    loss: float = attrs.field(default=0.0, converter=float, validator=_finite)
    illegal_move: float = attrs.field(default=-1.0, converter=float, validator=_finite)
    # Self-play only: what the other player gets when its opponent forfeits by an illegal move.
    opponent_forfeit: float = attrs.field(default=0.0, converter=float, validator=_finite)
    # Paid for every legal move that does not end the game (a shaping term; 0 keeps rewards sparse).
    step: float = attrs.field(default=0.0, converter=float, validator=_finite)

    @classmethod
    def coerce(cls, value: TicTacToeRewards | dict[str, float] | None) -> TicTacToeRewards:
        """Accept an instance, a mapping of overrides (JSON-friendly for env specs) or None."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in attrs.fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ConfigError(f"rewards: unknown keys {unknown}; known: {sorted(known)}")
            return cls(**value)
        raise ConfigError(f"rewards must be TicTacToeRewards, a dict or None, got {value!r}")
