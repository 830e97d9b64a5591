"""Small multi-agent envs used by the protocol tests."""

from __future__ import annotations

from collections.abc import Mapping

from ludic_core.env import LudicEnv
from ludic_core.types import Info, StepOutcome


class RaceToTenEnv(LudicEnv[str]):
    """Turn-based: players "a" and "b" alternately add 1 or 2 to a counter; reaching 10 wins.

    The mover gets the outcome of its move; the other player gets the new count as an observation
    (and the terminal loss when the mover wins). An invalid number ends nothing: the mover is told
    and must move again (reward -0.1).
    """

    def __init__(self, target: int = 10) -> None:
        self.target = target
        self.count = 0
        self.turn = "a"
        self.done = False

    @property
    def agent_ids(self) -> list[str]:
        return ["a", "b"]

    @property
    def active_agents(self) -> list[str]:
        return [] if self.done else [self.turn]

    @property
    def suggested_sysprompt(self) -> str:
        return "Add 1 or 2. Reach the target first."

    def reset(self, *, seed: int | None = None) -> dict[str, tuple[str, Info]]:
        self.count, self.turn, self.done = 0, "a", False
        return {"a": ("count=0, your move", {}), "b": ("count=0, wait", {})}

    def step(self, actions: Mapping[str, str]) -> dict[str, StepOutcome]:
        mover = self.turn
        other = "b" if mover == "a" else "a"
        action = actions[mover]
        if action not in ("1", "2"):
            return {mover: StepOutcome(obs=f"invalid {action!r}, move again", reward=-0.1)}
        self.count += int(action)
        if self.count >= self.target:
            self.done = True
            return {
                mover: StepOutcome(obs="you win", reward=1.0, terminated=True),
                other: StepOutcome(obs="you lose", reward=-1.0, terminated=True),
            }
        self.turn = other
        return {
            mover: StepOutcome(obs=f"count={self.count}, wait", reward=0.0),
            other: StepOutcome(obs=f"count={self.count}, your move", reward=0.0),
        }


class MatchingPenniesEnv(LudicEnv[str]):
    """Simultaneous moves for "even" and "odd" over ``rounds`` rounds: both say H or T.

    A round resolves only when both players have a valid move pending; a player that fails to parse
    keeps the other waiting (its move stays pending). "even" wins a round when the coins match.
    Optionally "odd" is eliminated (terminated) after ``eliminate_odd_after`` rounds while "even"
    plays on alone (independent termination).
    """

    def __init__(self, rounds: int = 3, eliminate_odd_after: int | None = None) -> None:
        self.rounds = rounds
        self.eliminate_odd_after = eliminate_odd_after
        self.round = 0
        self.pending: dict[str, str] = {}
        self.alive = ["even", "odd"]

    @property
    def agent_ids(self) -> list[str]:
        return ["even", "odd"]

    @property
    def active_agents(self) -> list[str]:
        if self.round >= self.rounds:
            return []
        return [a for a in self.alive if a not in self.pending]

    def reset(self, *, seed: int | None = None) -> dict[str, tuple[str, Info]]:
        self.round, self.pending, self.alive = 0, {}, ["even", "odd"]
        return {a: ("round 0: say H or T", {}) for a in self.agent_ids}

    def step(self, actions: Mapping[str, str]) -> dict[str, StepOutcome]:
        self.pending.update(actions)
        if set(self.pending) != set(self.alive):
            return {a: StepOutcome(obs="waiting for the other player") for a in actions}
        self.round += 1
        last = self.round >= self.rounds
        if self.alive == ["even"]:
            self.pending = {}
            return {"even": StepOutcome(obs=f"solo round {self.round}", reward=0.5, terminated=last)}
        match = self.pending["even"] == self.pending["odd"]
        self.pending = {}
        eliminate = (
            self.eliminate_odd_after is not None and self.round >= self.eliminate_odd_after and not last
        )
        outcomes = {
            "even": StepOutcome(obs=f"round {self.round}", reward=1.0 if match else 0.0, terminated=last),
            "odd": StepOutcome(
                obs=f"round {self.round}", reward=0.0 if match else 1.0, terminated=last or eliminate
            ),
        }
        if eliminate:
            self.alive = ["even"]
        return outcomes
