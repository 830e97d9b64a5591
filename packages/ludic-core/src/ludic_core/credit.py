"""Credit assignment: rollouts in, one weight per step out.

Every assigner maps ``(rollout.id, step.index)`` to a float for every step of every rollout it is
given; the SAW builder reads the weight of each turn's final step. Assigners count the rewards
:attr:`Rollout.total_reward` counts (env-step rewards and env-targeted parse-failure penalties;
:func:`counted_reward`), so an assigner never sees a reward the episode's return does not contain.

* :class:`MonteCarloReturn` — discounted return-to-go, discounted per turn;
* :class:`GroupNormalizedReturn` — GRPO / Dr. GRPO: ``total_reward`` minus the group mean (÷ group std),
  optionally clamped at 0;
* :class:`HybridNormalizedReturn` — ScaleRL: group-mean centring, batch-std scaling;
* :class:`PerStepReward` — the step's own counted reward;
* :class:`EpisodicReturn` — ``total_reward`` on every step;
* :class:`ConstantCredit` — one constant (SFT).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from ludic_core.errors import ConfigError, DataError
from ludic_core.types import EnvironmentStep, Rollout, Step
from ludic_core.validation import check_int

if TYPE_CHECKING:
    from ludic_core.saw import SAWItem

__all__ = [
    "ClampOrder",
    "ConstantCredit",
    "CreditAssigner",
    "EpisodicReturn",
    "GroupNormalizedReturn",
    "HybridNormalizedReturn",
    "MonteCarloReturn",
    "PerStepReward",
    "RolloutStepKey",
    "check_items_credit",
    "counted_reward",
    "credit_signature",
    "group_key",
    "group_rollouts",
]

RolloutStepKey: TypeAlias = tuple[str, int]
"""``(rollout.id, step.index)``."""


@runtime_checkable
class CreditAssigner(Protocol):
    """Turns rollouts into one weight per step."""

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]: ...


def credit_signature(credit_assigner: CreditAssigner) -> str:
    """What a SAW item records about the credit assigner that weighted it (its ``"credit"`` meta):
    the class name and its settings (the numeric, text and boolean attrs fields; state such as a
    shared value tracker is left out). The trainer compares it with its algorithm's credit assigner,
    so a batch source built with another one is refused rather than silently trained on."""
    cls: type[Any] = type(credit_assigner)
    if not attrs.has(cls):
        return cls.__name__
    settings = [
        f"{field.name}={getattr(credit_assigner, field.name)!r}"
        for field in attrs.fields(cls)
        if isinstance(getattr(credit_assigner, field.name), (int, float, str, bool, type(None)))
    ]
    return f"{cls.__name__}({', '.join(settings)})"


def check_items_credit(items: Iterable[SAWItem], credit_assigner: CreditAssigner, *, algorithm: str) -> bool:
    """Refuse items weighted by another credit assigner than ``credit_assigner`` (the one of the
    ``algorithm`` a trainer runs): trained on, they would make the algorithm's own credit assigner
    silently unused (GRPO and Dr. GRPO step for step alike). Returns whether some items carry no
    stamp (hand-made, or from outside Ludic): those train with their weights as given."""
    expected = credit_signature(credit_assigner)
    stamps = {item.meta.get("credit") for item in items}
    wrong = sorted(str(s) for s in stamps if s is not None and s != expected)
    if wrong:
        raise ConfigError(
            f"the batch's items were weighted by {', '.join(wrong)}, but algorithm {algorithm!r} assigns "
            f"credit with {expected}: build the batch source with credit_assigner=algorithm.credit_assigner "
            "(or train with the algorithm that matches it)"
        )
    return None in stamps


def counted_reward(step: Step) -> float:
    """The reward a step contributes to the episode's return (see the module docstring)."""
    if isinstance(step, EnvironmentStep):
        return step.reward
    if step.action_target == "env" and step.parse_error:
        return step.reward
    return 0.0


def _check_unique_ids(rollouts: Sequence[Rollout]) -> None:
    seen: set[str] = set()
    for rollout in rollouts:
        if rollout.id in seen:
            raise DataError(
                f"rollout id {rollout.id!r} appears twice; credit is keyed by (rollout.id, step.index)"
            )
        seen.add(rollout.id)


def _fill(rollouts: Sequence[Rollout], value_of: dict[str, float]) -> dict[RolloutStepKey, float]:
    return {(r.id, s.index): value_of[r.id] for r in rollouts for s in r.steps}


def group_key(rollout: Rollout) -> tuple[str, str | None]:
    """The GRPO group of a rollout: ``(group_id, agent_id)``.

    ``group_id`` comes from the request meta (set by :class:`~ludic_core.strategies.GRPORequestStrategy`);
    the agent id keeps the perspectives of a multi-agent episode apart, so that self-play rollouts of the
    first and the second player are baselined against their own role.
    """
    request_meta = rollout.meta.get("request_meta")
    group_id = request_meta.get("group_id") if isinstance(request_meta, dict) else None
    if group_id is None:
        group_id = rollout.meta.get("group_id")
    if group_id is None:
        raise DataError(
            f"rollout {rollout.id!r} has no group_id in its meta; group-based credit needs requests "
            "expanded by GRPORequestStrategy (or meta={'group_id': ...})"
        )
    agent_id = rollout.meta.get("agent_id")
    return str(group_id), None if agent_id is None else str(agent_id)


def _meta_group_size(rollout: Rollout) -> object:
    request_meta = rollout.meta.get("request_meta")
    size = request_meta.get("group_size") if isinstance(request_meta, dict) else None
    return rollout.meta.get("group_size") if size is None else size


def group_rollouts(
    rollouts: Sequence[Rollout], group_size: int | None = None
) -> dict[tuple[str, str | None], list[Rollout]]:
    """Rollouts by :func:`group_key`, in first-seen order; every group must be complete.

    A group's size is the ``group_size`` the request strategy wrote into its members' meta
    (:class:`~ludic_core.strategies.GRPORequestStrategy` does), so it is given once, to the strategy.
    A ``group_size`` passed here must agree with the meta where the meta has one, and stands in for it
    where it has none (hand-made groups)."""
    groups: dict[tuple[str, str | None], list[Rollout]] = {}
    for rollout in rollouts:
        groups.setdefault(group_key(rollout), []).append(rollout)
    for key, members in groups.items():
        sizes = {_meta_group_size(r) for r in members}
        if len(sizes) > 1:
            raise DataError(
                f"group {key[0]!r} (agent {key[1]!r}) mixes rollouts whose meta says group_size "
                f"{sorted(map(repr, sizes))}; a group's members come from one strategy expansion"
            )
        (meta_size,) = sizes
        where = f"group {key[0]!r} (agent {key[1]!r}): meta group_size"
        check_int(where, meta_size, optional=True, error=DataError)
        if meta_size is not None and group_size is not None and meta_size != group_size:
            raise ConfigError(
                f"group {key[0]!r} was requested with group_size={meta_size} but the credit assigner has "
                f"group_size={group_size}; leave the assigner's group_size unset to read it from the requests"
            )
        expected = meta_size if meta_size is not None else group_size
        if expected is None:
            raise DataError(
                f"group {key[0]!r} (agent {key[1]!r}) has no group_size in its meta; expand the requests "
                "with GRPORequestStrategy (it records the size), add meta={'group_size': n} to hand-made "
                "groups, or give the credit assigner group_size="
            )
        if len(members) != expected:
            raise DataError(
                f"group {key[0]!r} (agent {key[1]!r}) has {len(members)} rollouts, expected "
                f"group_size={expected}; drop incomplete groups before assigning credit"
            )
    return groups


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _population_std(values: Sequence[float]) -> float:
    mu = _mean(values)
    return math.sqrt(math.fsum((v - mu) ** 2 for v in values) / len(values))


def _centred(values: Sequence[float]) -> list[float]:
    # Identical rewards give exactly 0 (not ±ulp noise that a std division would blow up).
    if max(values) == min(values):
        return [0.0] * len(values)
    mu = _mean(values)
    return [v - mu for v in values]


@attrs.frozen
class MonteCarloReturn:
    """``G_k = R_k + gamma * G_{k+1}`` over the turns of a rollout; every step of turn k gets ``G_k``.

    ``R_k`` is the sum of the counted rewards of turn k (its env-step reward, or its parse-failure
    penalty). Discounting is per turn — one agent decision — so the model calls of an internal tool
    loop do not discount later rewards. With ``gamma=1`` the first turn's return is ``total_reward``.
    """

    gamma: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.gamma) and 0.0 <= self.gamma <= 1.0):
            raise ConfigError(f"MonteCarloReturn.gamma must be in [0, 1], got {self.gamma!r}")

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        out: dict[RolloutStepKey, float] = {}
        for rollout in rollouts:
            turns: list[list[Step]] = []
            for step in rollout.steps:
                if turns and turns[-1][-1].turn_id == step.turn_id:
                    turns[-1].append(step)
                else:
                    turns.append([step])
            future = 0.0
            for turn in reversed(turns):
                future = math.fsum(counted_reward(s) for s in turn) + self.gamma * future
                for step in turn:
                    out[(rollout.id, step.index)] = future
        return out


ClampOrder: TypeAlias = Literal["after_normalize", "before_normalize"]
"""When :class:`GroupNormalizedReturn`'s ``positive_only`` clamps, relative to the std division."""

_CLAMP_ORDERS: tuple[ClampOrder, ...] = ("after_normalize", "before_normalize")


def _clamped(values: Sequence[float]) -> list[float]:
    return [max(v, 0.0) for v in values]


@attrs.frozen
class GroupNormalizedReturn:
    """GRPO (``normalize_adv=True``) and Dr.GRPO (``False``) advantages.

    For each group (see :func:`group_key`; every group must be complete, see :func:`group_rollouts`;
    ``group_size`` is read from the meta the request strategy writes, so leave it ``None`` unless the
    groups are hand-made):
    ``A_i = R_i - mean(R)`` with ``R_i = rollout.total_reward``; with ``normalize_adv`` divided by the
    group's population std. A group whose rewards are all equal gets 0 (never NaN). Every step of a
    rollout gets its ``A_i``.

    ``positive_only`` clamps negative advantages to 0; ``clamp_order`` says when, which matters only
    together with ``normalize_adv`` (without it both orders give the same weights):

    * ``"after_normalize"`` (default): divide by the std of the centred advantages, then clamp. A
      positive weight is "how many group std devs above the mean", whatever the losers scored;
    * ``"before_normalize"``: clamp, then divide by the std of the clamped values (the original Ludic's
      order). That std shrinks as more of the group sits at 0, so the winners of a mostly-losing group
      get larger weights (rewards ``[1, 0, 0, 0]``: ``4/√3 ≈ 2.31`` instead of ``√3 ≈ 1.73``).

    The default stays ``"after_normalize"`` because its scale is the group's actual spread and does not
    depend on the clamp; ``"before_normalize"`` reproduces runs made with the original.
    Setting ``clamp_order`` without ``positive_only`` is a :class:`ConfigError` (it would do nothing).
    """

    group_size: int | None = None
    normalize_adv: bool = False
    positive_only: bool = False
    clamp_order: ClampOrder = "after_normalize"

    def __attrs_post_init__(self) -> None:
        check_int(f"{type(self).__name__}.group_size", self.group_size, 1, optional=True)
        if self.clamp_order not in _CLAMP_ORDERS:
            raise ConfigError(
                f"GroupNormalizedReturn.clamp_order must be one of {list(_CLAMP_ORDERS)}, "
                f"got {self.clamp_order!r}"
            )
        if self.clamp_order != "after_normalize" and not self.positive_only:
            raise ConfigError(
                f"GroupNormalizedReturn.clamp_order={self.clamp_order!r} only applies with "
                "positive_only=True, got positive_only=False"
            )

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        clamp_first = self.positive_only and self.clamp_order == "before_normalize"
        clamp_last = self.positive_only and self.clamp_order == "after_normalize"
        advantage: dict[str, float] = {}
        for members in group_rollouts(rollouts, self.group_size).values():
            centred = _centred([r.total_reward for r in members])
            if clamp_first:
                centred = _clamped(centred)
            # Non-zero clamped values always have spread: centring put a negative (now 0) beside them.
            if self.normalize_adv and any(centred):
                std = _population_std(centred)
                centred = [a / std for a in centred]
            if clamp_last:
                centred = _clamped(centred)
            for rollout, a in zip(members, centred, strict=True):
                advantage[rollout.id] = a
        return _fill(rollouts, advantage)


@attrs.frozen
class HybridNormalizedReturn:
    """ScaleRL advantages: ``A_i = (R_i - mean(R_group)) / std(all centred A in the batch)``.

    Centring is per group (strict sizes, as in :class:`GroupNormalizedReturn`); the scale is the
    population std of every centred advantage in the batch, so groups with little spread are not blown
    up. If every centred advantage is 0 the weights are 0. ``positive_only`` clamps after scaling.
    ``eps`` guards the division when the batch std is tiny but not zero.
    """

    group_size: int | None = None
    eps: float = 1e-8
    positive_only: bool = False

    def __attrs_post_init__(self) -> None:
        check_int(f"{type(self).__name__}.group_size", self.group_size, 1, optional=True)
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise ConfigError(f"HybridNormalizedReturn.eps must be finite and >= 0, got {self.eps!r}")

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        centred: dict[str, float] = {}
        for members in group_rollouts(rollouts, self.group_size).values():
            for rollout, a in zip(members, _centred([r.total_reward for r in members]), strict=True):
                centred[rollout.id] = a
        values = list(centred.values())
        advantage = dict.fromkeys(centred, 0.0)
        if values and any(values):
            scale = _population_std(values) + self.eps
            advantage = {rid: a / scale for rid, a in centred.items()}
        if self.positive_only:
            advantage = {rid: max(a, 0.0) for rid, a in advantage.items()}
        return _fill(rollouts, advantage)


@attrs.frozen
class PerStepReward:
    """Each step's own counted reward: the env reward of env steps, the penalty of env-targeted parse
    failures, 0 for every other agent step. The SAW item of a turn therefore carries the turn's reward."""

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        return {(r.id, s.index): counted_reward(s) for r in rollouts for s in r.steps}


@attrs.frozen
class EpisodicReturn:
    """``rollout.total_reward`` (undiscounted, counted rewards) on every step of the rollout."""

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        return _fill(rollouts, {r.id: r.total_reward for r in rollouts})


@attrs.frozen
class ConstantCredit:
    """The same weight on every step, whatever the rewards (supervised fine-tuning)."""

    value: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ConfigError(f"ConstantCredit.value must be finite, got {self.value!r}")

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        _check_unique_ids(rollouts)
        return _fill(rollouts, {r.id: float(self.value) for r in rollouts})
