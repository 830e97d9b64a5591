"""How episodes run, as one value: :class:`RolloutSettings`.

The engine, the online batch source, evaluation, the Redis pipeline actor and the ``ludic`` command all
run episodes the same way, so they all take this one frozen value rather than each re-declaring
``max_steps``, the timeouts, the concurrency limit, the failure policy and the worker processes. Build it once (in code or
from a run config) and pass it through; ``attrs.evolve(settings, concurrency=64)`` changes one field.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError
from ludic_core.validation import int_at_least, number_in, positive_number

__all__ = [
    "DEFAULT_EPISODE_TIMEOUT_S",
    "DEFAULT_MODEL_CALL_TIMEOUT_S",
    "FailurePolicy",
    "RolloutSettings",
]

FailurePolicy = Literal["raise", "continue"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("raise", "continue")

DEFAULT_MODEL_CALL_TIMEOUT_S = 600.0
"""The default bound on one model call: generous for a long completion on a slow CPU backend, yet a
dead server surfaces as a named timeout within minutes rather than a silent hang."""

DEFAULT_EPISODE_TIMEOUT_S = 3600.0
"""The default bound on one whole episode (every model call, tool call and env step)."""


def _policy(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in FAILURE_POLICIES:
        raise ConfigError(f"RolloutSettings.on_failure must be one of {FAILURE_POLICIES}, got {value!r}")


@attrs.frozen(kw_only=True)
class RolloutSettings:
    """How a batch of episodes runs.

    * ``max_steps`` — the most agent turns an episode may take; an episode still running then is
      truncated (and marked so), not failed.
    * ``concurrency`` — episodes in flight at once.
    * ``timeout_s`` — the bound on each model call (the protocol passes it to the client).
    * ``episode_timeout_s`` — the bound on a whole episode.
    * ``on_failure`` — ``"continue"`` keeps the other episodes and reports each failed one (counted in
      a batch's meta, never trained on); ``"raise"`` cancels the rest at the first failure and raises
      :class:`~ludic_core.errors.EpisodeError` (handy while writing an env or agent).
    * ``max_failure_rate`` — under ``"continue"``, the share of a call's episodes that may fail. A call
      with more failures still runs (and logs) every episode, then raises
      :class:`~ludic_core.errors.EpisodeError` naming the count and the first failure: a dead server or
      a wrong model name fails loudly instead of yielding a table of zeros or an empty batch. ``1``
      tolerates any number, ``0`` none.
    * ``workers`` — processes the episodes run in. ``1`` (the default) runs them in this process; ``N > 1``
      spawns N worker processes that each build the engine once and run their share of the episodes, so
      CPU-bound envs (code execution, math grading) use N cores. Seeds, order and results do not change
      with N; ``concurrency`` still bounds the episodes in flight across all of them. The engine's
      factories (or its ``worker_engine``) must pickle: see :mod:`ludic_core.rollout_workers`.
    """

    max_steps: int = attrs.field(validator=int_at_least(1))
    concurrency: int = attrs.field(default=8, validator=int_at_least(1))
    timeout_s: float = attrs.field(default=DEFAULT_MODEL_CALL_TIMEOUT_S, validator=positive_number())
    episode_timeout_s: float = attrs.field(default=DEFAULT_EPISODE_TIMEOUT_S, validator=positive_number())
    on_failure: FailurePolicy = attrs.field(default="continue", validator=_policy)
    max_failure_rate: float = attrs.field(default=0.5, validator=number_in(0, 1))
    workers: int = attrs.field(default=1, validator=int_at_least(1))

    @classmethod
    def coerce(cls, value: object, *, owner: str) -> RolloutSettings:
        """``value`` if it is a :class:`RolloutSettings`, else a :class:`ConfigError` naming ``owner``
        (the argument that received it) — the message shows how to build one."""
        if isinstance(value, cls):
            return value
        raise ConfigError(
            f"{owner} must be a RolloutSettings, e.g. RolloutSettings(max_steps=5), got {value!r}"
        )
