"""Single-stream Policy Optimisation (SPO; Xu & Ding, "Single-stream Policy Optimization", arXiv 2509.13232).

SPO has no groups: each prompt keeps a persistent success estimate, and a sample's baseline is that
estimate before its reward is seen. :class:`SPOValueTracker` holds a Beta(alpha, beta) posterior per
prompt with forgetting (``alpha <- rho*alpha + s``, ``beta <- rho*beta + (1 - s)``; ``rho`` adapts to
the policy's KL drift when given, ``clip(2 ** (-D / d_half), rho_min, rho_max)``, else is fixed).
:class:`SPOAdvantage`, the credit assigner, gives ``R - baseline`` normalised over the batch.
:class:`SPORequests` draws prompts with probability ∝ ``sqrt(p (1 - p)) + priority_eps``. Pass the
same tracker to both; the provider's ``state_dict`` carries it, so
:class:`~ludic_core.batch_sources.RolloutBatchSource` checkpoints it. Prompts are keyed by request meta
(``key_fn``, default ``sample_index``); multi-agent episodes, whose rollouts share request meta, need
their own key.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ludic_core.credit import RolloutStepKey, _check_unique_ids, _fill
from ludic_core.errors import ConfigError, DataError
from ludic_core.requests import RolloutRequest
from ludic_core.seeding import MAX_SEED, random_state_from_json, random_state_to_json
from ludic_core.types import Rollout
from ludic_core.validation import check_int, check_number

__all__ = ["SPOAdvantage", "SPORequests", "SPOValueTracker", "sample_index_key"]

PromptKeyFn = Callable[[Mapping[str, Any]], str]
"""``key_fn(request_meta) -> prompt key``."""

_STATE_FORMAT = 1


def sample_index_key(meta: Mapping[str, Any]) -> str:
    """The default prompt key: ``meta["sample_index"]`` as a string (JSON object keys are strings)."""
    if "sample_index" not in meta:
        raise DataError(
            f"request meta has no 'sample_index' (keys: {sorted(meta)}); SPO identifies prompts by it. "
            "Build requests with SPORequests or SequenceRequests, or give SPOValueTracker a key_fn"
        )
    value = meta["sample_index"]
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DataError(f"request meta sample_index must be an int or str, got {value!r}")
    return str(value)


def _finite(owner: str, name: str, value: object, *, low: float, high: float, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (low < value if low_open else low <= value) and value <= high  # type: ignore[operator]
    if not ok:
        bracket = "(" if low_open else "["
        raise ConfigError(f"{owner}.{name} must be a number in {bracket}{low}, {high}], got {value!r}")


def _check_success(key: str, value: object) -> float:
    name = f"SPOValueTracker: success for prompt {key!r}"
    return float(check_number(name, value, minimum=0, maximum=1, error=DataError))


@attrs.define
class SPOValueTracker:
    """Per-prompt Beta posterior of the success probability, with forgetting.

    Fields:

    * ``alpha0``, ``beta0`` — the prior of a prompt never seen (default Beta(1, 1): estimate 0.5, so
      unseen prompts get the highest sampling priority). :meth:`warm_start` replaces it for one prompt
      with counts from a few samples of the initial policy, as the authors do.
    * ``rho`` — the discount applied to the old counts at each update when no KL is given. The default
      0.875 is the paper's ``rho_min``: without a measure of the policy's movement, assume it moved
      enough to keep only about ``1 / (1 - rho) = 8`` observations' worth of memory.
    * ``d_half``, ``rho_min``, ``rho_max`` — the paper's KL-adaptive discount
      ``rho = clip(2 ** (-kl / d_half), rho_min, rho_max)``, used when :meth:`update` gets ``kl`` (the
      KL between the current policy and the last policy that sampled the prompt). Defaults 0.06,
      0.875, 0.96.
    * ``key_fn`` — the prompt key of a request meta (see :func:`sample_index_key`).

    The estimate is ``alpha / (alpha + beta)``.
    """

    alpha0: float = 1.0
    beta0: float = 1.0
    rho: float = 0.875
    d_half: float = 0.06
    rho_min: float = 0.875
    rho_max: float = 0.96
    key_fn: PromptKeyFn = attrs.field(default=sample_index_key, repr=False)
    _counts: dict[str, tuple[float, float]] = attrs.field(init=False, factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        owner = "SPOValueTracker"
        _finite(owner, "alpha0", self.alpha0, low=0.0, high=math.inf)
        _finite(owner, "beta0", self.beta0, low=0.0, high=math.inf)
        if self.alpha0 + self.beta0 <= 0:
            raise ConfigError(
                f"SPOValueTracker.alpha0 + beta0 must be > 0, got alpha0={self.alpha0!r}, beta0={self.beta0!r}"
            )
        _finite(owner, "rho", self.rho, low=0.0, high=1.0, low_open=True)
        _finite(owner, "d_half", self.d_half, low=0.0, high=math.inf, low_open=True)
        _finite(owner, "rho_min", self.rho_min, low=0.0, high=1.0, low_open=True)
        _finite(owner, "rho_max", self.rho_max, low=0.0, high=1.0, low_open=True)
        if self.rho_min > self.rho_max:
            raise ConfigError(
                f"SPOValueTracker.rho_min must be <= rho_max, got rho_min={self.rho_min!r}, "
                f"rho_max={self.rho_max!r}"
            )
        if not callable(self.key_fn):
            raise ConfigError(f"SPOValueTracker.key_fn must be callable, got {self.key_fn!r}")

    # -- keys -----------------------------------------------------------------------------------------

    def key_of_meta(self, meta: Mapping[str, Any]) -> str:
        key = self.key_fn(meta)
        if not isinstance(key, str):
            raise DataError(f"SPOValueTracker.key_fn returned {type(key).__name__} {key!r}; expected a str")
        return key

    def key_of_rollout(self, rollout: Rollout) -> str:
        """The key of the request that produced ``rollout`` (its ``request_meta``)."""
        request_meta = rollout.meta.get("request_meta")
        meta = request_meta if isinstance(request_meta, Mapping) else rollout.meta
        try:
            return self.key_of_meta(meta)
        except DataError as e:
            raise DataError(f"rollout {rollout.id!r}: {e}") from e

    # -- estimates ------------------------------------------------------------------------------------

    def counts(self, key: str) -> tuple[float, float]:
        """``(alpha, beta)`` of a prompt (the prior for one never seen)."""
        return self._counts.get(key, (self.alpha0, self.beta0))

    def estimate(self, key: str) -> float:
        """The posterior mean success probability of a prompt."""
        alpha, beta = self.counts(key)
        return alpha / (alpha + beta)

    def __contains__(self, key: object) -> bool:
        return key in self._counts

    def __len__(self) -> int:
        return len(self._counts)

    def discount(self, kl: float | None = None) -> float:
        """The forgetting factor: fixed ``rho`` without a KL, else ``clip(2**(-kl/d_half), rho_min, rho_max)``."""
        if kl is None:
            return self.rho
        check_number("SPOValueTracker: kl", kl, minimum=0, error=DataError)
        return min(max(2.0 ** (-kl / self.d_half), self.rho_min), self.rho_max)

    # -- updates --------------------------------------------------------------------------------------

    def update(self, key: str, successes: float | Sequence[float], *, kl: float | None = None) -> None:
        """Fold one or more observations of a prompt into its posterior.

        The old counts are discounted once, then every success is added:
        ``alpha <- rho*alpha + sum(s)``, ``beta <- rho*beta + sum(1 - s)``. Several successes in one
        call are samples of the *same* policy, so forgetting between them would throw away evidence
        about that policy; with one success this is the paper's update exactly. Fractional successes
        count as that fraction of a success (a reward of 0.5 adds 0.5 to each count).
        """
        values = [successes] if isinstance(successes, (int, float)) else list(successes)
        checked = [_check_success(key, s) for s in values]
        if not checked:
            return
        rho = self.discount(kl)
        alpha, beta = self.counts(key)
        self._counts[key] = (
            rho * alpha + math.fsum(checked),
            rho * beta + math.fsum(1.0 - s for s in checked),
        )

    def warm_start(
        self, key: str, successes: Sequence[float], *, effective_count: float | None = None
    ) -> None:
        """Replace a prompt's counts with ``alpha = n*v0``, ``beta = n*(1 - v0)`` from a few samples of the
        initial policy, as the SPO authors initialise their tracker.

        ``v0 = (sum(successes) + 0.5) / (len(successes) + 1)``: the authors' smoothed estimate, so a
        prompt solved (or failed) by every sample still starts short of certainty. ``n`` is
        ``effective_count``, by default the authors' ``1 / (1 - rho_min)`` (8 with the defaults): the
        start weighs like a full memory window of later observations.
        """
        checked = [_check_success(key, s) for s in successes]
        if not checked:
            raise DataError(f"SPOValueTracker.warm_start: no successes given for prompt {key!r}")
        n = 1.0 / (1.0 - self.rho_min) if effective_count is None else effective_count
        _finite("SPOValueTracker.warm_start", "effective_count", n, low=0.0, high=math.inf, low_open=True)
        v0 = (math.fsum(checked) + 0.5) / (len(checked) + 1)
        self._counts[key] = (n * v0, n * (1.0 - v0))

    # -- state ----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Every prompt's ``[alpha, beta]``, as plain JSON types (floats survive ``json`` exactly)."""
        return {"format": _STATE_FORMAT, "counts": {k: [a, b] for k, (a, b) in self._counts.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Accepts :meth:`state_dict` as returned or after a JSON round trip; replaces every count."""
        if state.get("format") != _STATE_FORMAT:
            raise ConfigError(
                f"SPOValueTracker state format must be {_STATE_FORMAT}, got {state.get('format')!r}"
            )
        raw = state.get("counts")
        if not isinstance(raw, Mapping):
            raise ConfigError(f"SPOValueTracker state counts must be a mapping, got {type(raw).__name__}")
        counts: dict[str, tuple[float, float]] = {}
        for key, pair in raw.items():
            ok = (
                isinstance(key, str)
                and isinstance(pair, (list, tuple))
                and len(pair) == 2
                and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                    for x in pair
                )
                and pair[0] + pair[1] > 0
            )
            if not ok:
                raise ConfigError(
                    f"SPOValueTracker state counts[{key!r}] must be [alpha, beta] (finite, >= 0, "
                    f"sum > 0), got {pair!r}"
                )
            counts[key] = (float(pair[0]), float(pair[1]))
        self._counts = counts


@attrs.frozen
class SPOAdvantage:
    """SPO advantages: ``A_i = R_i - b_i`` normalised over the batch, ``(A - mean(A)) / (std(A) + eps)``.

    ``R_i`` is ``rollout.total_reward`` (the counted rewards, as every Ludic assigner uses) and ``b_i``
    the tracker's estimate of the rollout's prompt *before* this batch is folded in, scaled to the
    reward range: ``b = reward_min + (reward_max - reward_min) * p``. Then each prompt's posterior is
    updated with its rollouts' successes ``s = (R - reward_min) / (reward_max - reward_min)`` — a
    binary reward in {0, 1} is the paper's case; a reward in between counts as a fractional success. A
    reward outside ``[reward_min, reward_max]`` raises (a silent clip would hide a mis-set range), so
    a format penalty below 0 needs ``reward_min`` set to it.

    Several rollouts of one prompt in a batch all get the estimate from before the batch (none sees
    another's reward) and one discounted update together (see :meth:`SPOValueTracker.update`).

    ``std`` is the population std over the batch's rollouts; if every advantage is equal (one rollout,
    or all rewards equal to their baselines alike) every weight is exactly 0, never NaN: there is no
    direction to push. ``kl_of``, if given, returns the KL between the current policy and the last
    that sampled a rollout's prompt (``None``: use the fixed ``rho``); the first non-``None`` value
    among a prompt's rollouts is used.

    ``compute`` **updates the tracker**: call it once per batch (the engine does).
    """

    tracker: SPOValueTracker
    eps: float = 1e-8
    reward_min: float = 0.0
    reward_max: float = 1.0
    kl_of: Callable[[Rollout], float | None] | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.tracker, SPOValueTracker):
            raise ConfigError(f"SPOAdvantage.tracker must be an SPOValueTracker, got {self.tracker!r}")
        _finite("SPOAdvantage", "eps", self.eps, low=0.0, high=math.inf)
        _finite("SPOAdvantage", "reward_min", self.reward_min, low=-math.inf, high=math.inf)
        _finite("SPOAdvantage", "reward_max", self.reward_max, low=-math.inf, high=math.inf)
        if self.reward_max <= self.reward_min:
            raise ConfigError(
                f"SPOAdvantage.reward_max must be > reward_min, got reward_min={self.reward_min!r}, "
                f"reward_max={self.reward_max!r}"
            )

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        if not rollouts:
            return {}
        span = self.reward_max - self.reward_min
        # Validate everything before touching the tracker, so a bad rollout leaves it as it was.
        keys = [self.tracker.key_of_rollout(r) for r in rollouts]
        rewards = [r.total_reward for r in rollouts]
        for rollout, reward in zip(rollouts, rewards, strict=True):
            if not (math.isfinite(reward) and self.reward_min <= reward <= self.reward_max):
                raise DataError(
                    f"rollout {rollout.id!r} has total_reward={reward!r} outside SPOAdvantage's "
                    f"[reward_min, reward_max] = [{self.reward_min}, {self.reward_max}]"
                )
        baseline = {k: self.reward_min + span * self.tracker.estimate(k) for k in keys}
        raw = [reward - baseline[k] for reward, k in zip(rewards, keys, strict=True)]

        successes: dict[str, list[float]] = {}
        kl: dict[str, float | None] = {}
        for rollout, key, reward in zip(rollouts, keys, rewards, strict=True):
            # Clamp float noise of (reward - min) / span at the edges of the range.
            successes.setdefault(key, []).append(min(max((reward - self.reward_min) / span, 0.0), 1.0))
            if kl.get(key) is None and self.kl_of is not None:
                kl[key] = self.kl_of(rollout)
        for key, values in successes.items():
            self.tracker.update(key, values, kl=kl.get(key))

        advantage = [0.0] * len(raw)
        if max(raw) != min(raw):
            mean = math.fsum(raw) / len(raw)
            std = math.sqrt(math.fsum((a - mean) ** 2 for a in raw) / len(raw))
            advantage = [(a - mean) / (std + self.eps) for a in raw]
        return _fill(rollouts, {r.id: a for r, a in zip(rollouts, advantage, strict=True)})


@attrs.define
class SPORequests:
    """Requests provider: each step draws ``batch_size`` distinct prompts from ``samples`` by priority.

    A prompt's priority is ``sqrt(p * (1 - p)) + priority_eps`` with ``p`` the shared tracker's
    estimate (the paper's prioritised sampling; ``priority_eps`` keeps solved and hopeless prompts in
    rotation). Prompts are drawn without replacement within a step (weighted sampling by
    Efraimidis–Spirakis keys ``log(u) / w``), so a batch mixes different prompts; each is built with
    ``build(sample, index)``, tagged with ``sample_index`` and repeated ``samples_per_prompt`` times
    (default 1: group-free). Copies of a request with an explicit ``sampling_seed`` get ``seed + i``.

    Unlike :class:`~ludic_core.curriculum.SequenceRequests`, a step's prompts depend on the tracker,
    i.e. on the rewards seen so far, so the RNG is stateful: ``state_dict`` holds it and the tracker's
    counts, and a resumed run draws exactly what an uninterrupted one would.
    """

    samples: Sequence[Any]
    build: Callable[[Any, int], RolloutRequest]
    batch_size: int
    tracker: SPOValueTracker
    samples_per_prompt: int = 1
    priority_eps: float = 0.05
    seed: int = 0
    _rng: random.Random = attrs.field(init=False, repr=False)
    _keys: list[str] | None = attrs.field(init=False, default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if len(self.samples) == 0:
            raise ConfigError("SPORequests needs at least one sample")
        check_int("SPORequests.batch_size", self.batch_size, 1)
        if self.batch_size > len(self.samples):
            raise ConfigError(
                f"SPORequests.batch_size={self.batch_size} exceeds the pool of {len(self.samples)} samples; "
                "prompts are drawn without replacement within a step (raise samples_per_prompt instead)"
            )
        check_int("SPORequests.samples_per_prompt", self.samples_per_prompt, 1)
        _finite("SPORequests", "priority_eps", self.priority_eps, low=0.0, high=math.inf, low_open=True)
        check_int("SPORequests.seed", self.seed, 0)
        if not isinstance(self.tracker, SPOValueTracker):
            raise ConfigError(f"SPORequests.tracker must be an SPOValueTracker, got {self.tracker!r}")
        self._rng = random.Random(self.seed)

    def _build(self, index: int) -> RolloutRequest:
        request = self.build(self.samples[index], index)
        if not isinstance(request, RolloutRequest):
            raise ConfigError(f"build returned {type(request).__name__}, expected a RolloutRequest")
        return request.with_changes(meta={**request.meta, "sample_index": index})

    def keys(self) -> list[str]:
        """The prompt key of every sample (built once, on first use, with the tracker's ``key_fn``)."""
        if self._keys is None:
            keys = [self.tracker.key_of_meta(self._build(i).meta) for i in range(len(self.samples))]
            first: dict[str, int] = {}
            for i, key in enumerate(keys):
                if key in first:
                    raise ConfigError(
                        f"samples {first[key]} and {i} have the same prompt key {key!r}; SPO tracks one "
                        "posterior per key, so every pool sample needs its own"
                    )
                first[key] = i
            self._keys = keys
        return self._keys

    def priorities(self) -> list[float]:
        """``sqrt(p (1 - p)) + priority_eps`` for every sample, in pool order."""
        out = []
        for key in self.keys():
            p = self.tracker.estimate(key)
            out.append(math.sqrt(max(p * (1.0 - p), 0.0)) + self.priority_eps)
        return out

    def __call__(self, step: int) -> list[RolloutRequest]:
        check_int("step", step, 0)
        weights = self.priorities()
        # 1 - random() is in (0, 1], so the log is finite; every weight is > 0 (priority_eps > 0).
        scores = [math.log(1.0 - self._rng.random()) / w for w in weights]
        chosen = heapq.nlargest(self.batch_size, range(len(scores)), key=scores.__getitem__)
        out: list[RolloutRequest] = []
        for index in chosen:
            request = self._build(index)
            for i in range(self.samples_per_prompt):
                if i and request.sampling_seed is not None:
                    out.append(
                        request.with_changes(sampling_seed=(request.sampling_seed + i) % (MAX_SEED + 1))
                    )
                else:
                    out.append(request)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The RNG state and the tracker's counts (plain JSON types)."""
        return {
            "seed": self.seed,
            "rng_state": random_state_to_json(self._rng),
            "tracker": self.tracker.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Accepts :meth:`state_dict` as returned or after a JSON round trip; restores the shared tracker."""
        rng_state = random_state_from_json(state.get("rng_state"), field="SPORequests state rng_state")
        tracker_state = state.get("tracker")
        if not isinstance(tracker_state, Mapping):
            raise ConfigError(
                f"SPORequests state tracker must be a mapping, got {type(tracker_state).__name__}"
            )
        self.tracker.load_state_dict(tracker_state)
        self._rng.setstate(rng_state)
