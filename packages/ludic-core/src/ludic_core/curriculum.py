"""Inter-batch control: which requests to run at each training step.

A *requests provider* is any callable ``provider(step) -> requests``; the online batch source calls it
once per batch with its step counter. Because the providers here derive their randomness from
``(seed, step)`` alone, ``provider(k)`` is the same whether the run started at step 0 or resumed at k.

* :class:`MixtureCurriculum` — sample each batch from several request builders (envs, difficulty
  levels) with weights that follow a schedule over steps;
* :func:`linear_schedule` / :func:`piecewise_schedule` — such schedules;
* :class:`SequenceRequests` — walk a dataset in seeded-shuffled epochs, ``batch_size`` samples a step.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from ludic_core.errors import ConfigError
from ludic_core.requests import RolloutRequest
from ludic_core.seeding import derive_seed
from ludic_core.strategies import IdentityStrategy, RequestStrategy
from ludic_core.validation import check_int, check_number

__all__ = [
    "MixtureCurriculum",
    "RequestBuilder",
    "RequestsProvider",
    "Schedule",
    "SequenceRequests",
    "linear_schedule",
    "piecewise_schedule",
]

RequestsProvider: TypeAlias = Callable[[int], Sequence[RolloutRequest]]
"""``provider(step) -> requests`` for one batch."""

RequestBuilder: TypeAlias = Callable[[random.Random, int], RolloutRequest]
"""``builder(rng, step) -> request``: build one base request (e.g. pick a difficulty for this step)."""

Schedule: TypeAlias = Callable[[int], Mapping[str, float]]
"""``schedule(step) -> {source name: weight}`` (weights need not sum to 1)."""


def _check_weights(weights: Mapping[str, object], known: Sequence[str], step: int) -> None:
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise ConfigError(f"schedule at step {step} names unknown sources {unknown}; known: {sorted(known)}")
    for name, w in weights.items():
        check_number(f"schedule at step {step}: weight of {name!r}", w, minimum=0)
    if not any(float(w) > 0 for w in weights.values()):  # type: ignore[arg-type]
        raise ConfigError(f"schedule at step {step} gives every source weight 0: {dict(weights)}")


def linear_schedule(start: Mapping[str, float], end: Mapping[str, float], steps: int) -> Schedule:
    """Weights moving linearly from ``start`` (step 0) to ``end`` (step ``steps`` and after)."""
    check_int("linear_schedule steps", steps, 1)
    names = sorted(set(start) | set(end))

    def schedule(step: int) -> dict[str, float]:
        t = min(max(step, 0), steps) / steps
        return {n: (1 - t) * start.get(n, 0.0) + t * end.get(n, 0.0) for n in names}

    return schedule


def piecewise_schedule(stages: Sequence[tuple[int, Mapping[str, float]]]) -> Schedule:
    """``[(first_step, weights), ...]``: each stage's weights apply from its first step on."""
    if not stages:
        raise ConfigError("piecewise_schedule needs at least one stage")
    starts = [s for s, _ in stages]
    if starts[0] != 0 or starts != sorted(set(starts)):
        raise ConfigError(
            f"piecewise_schedule stages must start at 0 and increase strictly, got starts {starts}"
        )

    def schedule(step: int) -> Mapping[str, float]:
        current = stages[0][1]
        for first, weights in stages:
            if step >= first:
                current = weights
        return current

    return schedule


@attrs.define
class MixtureCurriculum:
    """``batch_size`` base requests per step, each from a source drawn with the schedule's weights.

    The draw and the builders use ``random.Random(derive_seed(seed, step))``, so a step's base requests
    depend only on the seed and the step. Base requests are tagged with ``curriculum_source`` and
    ``curriculum_step`` in their meta, then expanded by ``strategy`` (e.g. GRPO groups). A strategy
    that draws seeds and ids from its own RNG is stateful: ``state_dict`` carries its state, and
    :class:`~ludic_core.batch_sources.RolloutBatchSource` checkpoints it with its own.
    """

    sources: Mapping[str, RequestBuilder]
    schedule: Schedule
    batch_size: int
    strategy: RequestStrategy = attrs.field(factory=IdentityStrategy)
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if not self.sources:
            raise ConfigError("MixtureCurriculum needs at least one source")
        check_int("MixtureCurriculum.batch_size", self.batch_size, 1)
        check_int("MixtureCurriculum.seed", self.seed, 0)

    def __call__(self, step: int) -> list[RolloutRequest]:
        check_int("step", step, 0)
        weights = self.schedule(step)
        names = list(self.sources)
        _check_weights(weights, names, step)
        rng = random.Random(derive_seed(self.seed, "mixture", step))
        chosen = rng.choices(names, weights=[weights.get(n, 0.0) for n in names], k=self.batch_size)
        base: list[RolloutRequest] = []
        for name in chosen:
            request = self.sources[name](rng, step)
            if not isinstance(request, RolloutRequest):
                raise ConfigError(
                    f"source {name!r} returned {type(request).__name__}, expected a RolloutRequest"
                )
            meta: dict[str, Any] = {**request.meta, "curriculum_source": name, "curriculum_step": step}
            base.append(request.with_changes(meta=meta))
        return self.strategy.expand(base)

    def state_dict(self) -> dict[str, Any]:
        return _strategy_state(self.strategy)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _load_strategy_state(self.strategy, state, "MixtureCurriculum")


@attrs.define
class SequenceRequests:
    """Walk ``samples`` in epochs, ``batch_size`` per step, reshuffled each epoch with a seeded RNG.

    ``build(sample, index) -> RolloutRequest`` turns a sample (with its position in ``samples``) into a
    base request; ``sample_index`` is added to its meta. Step ``k`` covers global positions
    ``k*batch_size ... (k+1)*batch_size - 1`` of the endless epoch sequence, so the base requests need
    only k to resume; ``state_dict`` carries the state of a stateful ``strategy`` (GRPO's RNG).
    """

    samples: Sequence[Any]
    build: Callable[[Any, int], RolloutRequest]
    batch_size: int
    shuffle: bool = True
    seed: int = 0
    strategy: RequestStrategy = attrs.field(factory=IdentityStrategy)
    _orders: dict[int, list[int]] = attrs.field(init=False, factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        if len(self.samples) == 0:
            raise ConfigError("SequenceRequests needs at least one sample")
        check_int("SequenceRequests.batch_size", self.batch_size, 1)
        check_int("SequenceRequests.seed", self.seed, 0)

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.samples)))
            if self.shuffle:
                random.Random(derive_seed(self.seed, "epoch", epoch)).shuffle(order)
            self._orders = {epoch: order}  # keep one epoch: steps move forward
        return self._orders[epoch]

    def __call__(self, step: int) -> list[RolloutRequest]:
        check_int("step", step, 0)
        base: list[RolloutRequest] = []
        for position in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, offset = divmod(position, len(self.samples))
            index = self._order(epoch)[offset]
            request = self.build(self.samples[index], index)
            if not isinstance(request, RolloutRequest):
                raise ConfigError(f"build returned {type(request).__name__}, expected a RolloutRequest")
            base.append(request.with_changes(meta={**request.meta, "sample_index": index, "epoch": epoch}))
        return self.strategy.expand(base)

    def state_dict(self) -> dict[str, Any]:
        return _strategy_state(self.strategy)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _load_strategy_state(self.strategy, state, "SequenceRequests")


def _strategy_state(strategy: RequestStrategy) -> dict[str, Any]:
    get = getattr(strategy, "state_dict", None)
    return {"strategy": get()} if callable(get) else {}


def _load_strategy_state(strategy: RequestStrategy, state: Mapping[str, Any], owner: str) -> None:
    if "strategy" not in state:
        return
    load = getattr(strategy, "load_state_dict", None)
    if not callable(load):
        raise ConfigError(
            f"{owner} state has strategy state, but its strategy {strategy!r} has no load_state_dict"
        )
    load(state["strategy"])
