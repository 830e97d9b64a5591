"""What one :meth:`~ludic_core.engine.RolloutEngine.generate_rollouts` call returns: each episode's
request, seeds, rollouts and failure (:class:`EpisodeResult`), and the call's episodes in request order
with their failure accounting (:class:`RolloutResult`). Both are importable from
:mod:`ludic_core.engine` too."""

from __future__ import annotations

from typing import Any

import attrs

from ludic_core.data_fields import slot_setters
from ludic_core.errors import EpisodeError
from ludic_core.requests import RolloutRequest
from ludic_core.types import EpisodeFailure, Rollout

__all__ = ["EpisodeResult", "RolloutResult"]


@attrs.frozen
class EpisodeResult:
    """One episode: its request, the seeds it ran with, its rollouts, and its failure if it failed.

    A failed episode still lists the rollouts its protocol returned (partial, each with ``failure``
    set); an episode the engine had to stop (timeout, protocol crash) gets one empty rollout carrying
    the failure, so every failure is visible in the rollouts and the log.
    """

    episode_index: int
    request: RolloutRequest
    env_seed: int
    sampling_seed: int
    rollouts: tuple[Rollout, ...]
    failure: EpisodeFailure | None
    duration_s: float

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @classmethod
    def _of(
        cls,
        episode_index: int,
        request: RolloutRequest,
        env_seed: int,
        sampling_seed: int,
        rollouts: tuple[Rollout, ...],
        failure: EpisodeFailure | None,
        duration_s: float,
    ) -> EpisodeResult:
        """The value ``__init__`` builds (its fields have no converters or checks), set through the
        slots' own setters (see :func:`~ludic_core.data_fields.slot_setters`): once per episode."""
        result = object.__new__(cls)
        (
            set_episode_index,
            set_request,
            set_env_seed,
            set_sampling_seed,
            set_rollouts,
            set_failure,
            set_duration_s,
        ) = _EPISODE_RESULT_SLOTS
        set_episode_index(result, episode_index)
        set_request(result, request)
        set_env_seed(result, env_seed)
        set_sampling_seed(result, sampling_seed)
        set_rollouts(result, rollouts)
        set_failure(result, failure)
        set_duration_s(result, duration_s)
        return result


_EPISODE_RESULT_SLOTS = slot_setters(EpisodeResult)


@attrs.frozen
class RolloutResult:
    """The episodes of one :meth:`RolloutEngine.generate_rollouts` call, in request order."""

    episodes: tuple[EpisodeResult, ...]

    def __repr__(self) -> str:
        # Counts, not attrs' field-by-field repr: that spells out every step's token ids (megabytes for
        # a few hundred episodes), and on Python 3.11 and 3.12 asyncio.run builds the repr of whatever
        # its coroutine returns, twice (`asyncio.run(engine.generate_rollouts(...))` paid ~0.3 s for
        # 600 short episodes). The episodes themselves are one attribute away.
        rollouts = self.rollouts
        steps = sum(len(r.steps) for r in rollouts)
        return (
            f"RolloutResult({len(self.episodes)} episodes, {len(rollouts)} rollouts, {steps} steps, "
            f"{len(self.failed_episodes)} failed)"
        )

    @property
    def rollouts(self) -> list[Rollout]:
        """Every rollout, failed ones included."""
        return [r for e in self.episodes for r in e.rollouts]

    @property
    def successful_rollouts(self) -> list[Rollout]:
        return [r for e in self.episodes if not e.failed for r in e.rollouts]

    @property
    def failed_episodes(self) -> list[EpisodeResult]:
        return [e for e in self.episodes if e.failed]

    def check_failure_rate(self, max_failure_rate: float) -> None:
        """Raise :class:`~ludic_core.errors.EpisodeError` if more than ``max_failure_rate`` of the
        episodes failed, naming the first failed episode (in request order) and its cause."""
        failed = self.failed_episodes
        if not failed or len(failed) <= max_failure_rate * len(self.episodes):
            return
        first = failed[0]
        assert first.failure is not None
        same = sum(
            1 for e in failed if e.failure is not None and e.failure.error_type == first.failure.error_type
        )
        raise EpisodeError(
            f"{len(failed)} of {len(self.episodes)} episodes failed, more than "
            f"RolloutSettings.max_failure_rate={max_failure_rate}; the first (episode {first.episode_index}, "
            f"env {first.request.env.kind!r}) failed in stage {first.failure.stage!r}: "
            f"{first.failure.error_type}: {first.failure.message} ({same} of the {len(failed)} failed with "
            f"{first.failure.error_type})"
        )

    def failure_summary(self) -> list[dict[str, Any]]:
        """JSON-friendly: one entry per failed episode (no tracebacks)."""
        return [
            {
                "episode_index": e.episode_index,
                "stage": e.failure.stage,
                "error_type": e.failure.error_type,
                "message": e.failure.message,
            }
            for e in self.failed_episodes
            if e.failure is not None
        ]
