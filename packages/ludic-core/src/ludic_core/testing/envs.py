"""A tiny deterministic env for tests and examples."""

from __future__ import annotations

import random

from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError
from ludic_core.types import Info, StepOutcome

__all__ = ["GuessNumberEnv"]


class GuessNumberEnv(SingleAgentEnv):
    """Guess a secret integer in ``[1, max_number]`` drawn from the reset seed.

    * correct guess: reward ``1.0``, terminated;
    * wrong number: reward ``0.0``, obs ``"Higher."`` or ``"Lower."``;
    * not an integer: reward ``invalid_reward`` (default ``-0.5``), obs says so;
    * after ``max_guesses`` guesses without success the env truncates (reason ``env``).
    """

    def __init__(
        self,
        *,
        max_number: int = 10,
        max_guesses: int | None = None,
        invalid_reward: float = -0.5,
        agent_id: str = "agent_0",
    ) -> None:
        super().__init__(agent_id=agent_id)
        if max_number < 1:
            raise ConfigError(f"GuessNumberEnv.max_number must be >= 1, got {max_number!r}")
        if max_guesses is not None and max_guesses < 1:
            raise ConfigError(f"GuessNumberEnv.max_guesses must be None or >= 1, got {max_guesses!r}")
        self.max_number = max_number
        self.max_guesses = max_guesses
        self.invalid_reward = invalid_reward
        self.secret = 1
        self.guesses = 0
        self.done = False

    @property
    def suggested_sysprompt(self) -> str:
        return f"Guess the secret number between 1 and {self.max_number}. Reply with the number only."

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        self.secret = random.Random(seed).randint(1, self.max_number)
        self.guesses = 0
        self.done = False
        return f"Guess a number between 1 and {self.max_number}.", {"max_number": self.max_number}

    def env_step(self, action: str) -> StepOutcome:
        if self.done:
            raise ConfigError("GuessNumberEnv.step called after the episode ended; call reset first")
        self.guesses += 1
        try:
            guess = int(action.strip())
        except ValueError:
            outcome = StepOutcome(
                obs=f"{action!r} is not an integer.", reward=self.invalid_reward, info={"valid": False}
            )
        else:
            if guess == self.secret:
                self.done = True
                return StepOutcome(
                    obs="Correct!", reward=1.0, terminated=True, info={"valid": True, "correct": True}
                )
            hint = "Higher." if guess < self.secret else "Lower."
            outcome = StepOutcome(obs=hint, reward=0.0, info={"valid": True, "correct": False})
        if self.max_guesses is not None and self.guesses >= self.max_guesses:
            self.done = True
            return StepOutcome(obs=outcome.obs, reward=outcome.reward, truncated=True, info=outcome.info)
        return outcome
