"""Evaluation: run requests, keep a record of everything that happened, reduce records to metrics.

Records are JSON-friendly dicts: one per rollout (failed episodes and episodes that never reached the env
included) and one per turn (parse failures included). A reducer's mean is over *all* records of its
kind and a record without the reduced key counts 0, so an answer that never parsed is a wrong answer.
Reducers: :class:`Reducer` (mean / sum / rate over samples or rollouts), :class:`PassAtK` and
:class:`MeanAtK` over groups expanded by :class:`~ludic_core.strategies.GRPORequestStrategy`.
"""

from __future__ import annotations

import abc
import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from ludic_core.engine import EpisodeResult, RolloutEngine
from ludic_core.errors import ConfigError, DataError
from ludic_core.requests import RolloutRequest
from ludic_core.rollout_settings import RolloutSettings
from ludic_core.saw_builder import split_turns
from ludic_core.types import AgentStep, EnvironmentStep, Rollout
from ludic_core.validation import check_int

__all__ = [
    "EvalResult",
    "MeanAtK",
    "MetricReducer",
    "PassAtK",
    "ProgressCallback",
    "Record",
    "Reducer",
    "rollout_record",
    "run_eval",
    "run_eval_sync",
    "sample_records",
    "standard_reducers",
]

Record: TypeAlias = dict[str, Any]
ProgressCallback: TypeAlias = Callable[[int, int], None]
"""``progress(done, total)`` after every finished episode."""

_SCALAR = (str, int, float, bool, type(None))


def _scalars(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if isinstance(v, _SCALAR)}


def _group_fields(rollout: Rollout) -> dict[str, Any]:
    request_meta = rollout.meta.get("request_meta")
    group_id = request_meta.get("group_id") if isinstance(request_meta, Mapping) else None
    engine = rollout.meta.get("engine")
    engine = engine if isinstance(engine, Mapping) else {}
    return {
        "rollout_id": rollout.id,
        "episode_index": rollout.meta.get("episode_index"),
        "agent_id": rollout.meta.get("agent_id"),
        "env_name": rollout.meta.get("env_name"),
        "group_id": group_id if group_id is not None else rollout.meta.get("group_id"),
        "env_seed": engine.get("env_seed"),
        "sampling_seed": engine.get("sampling_seed"),
    }


def rollout_record(rollout: Rollout) -> Record:
    """One rollout as a flat record. Scalar request/rollout meta and the scalar info of the last env
    step (e.g. an env's ``correct``) come first; the fixed fields below override them."""
    env_steps = rollout.env_steps
    agent_steps = rollout.agent_steps
    last = rollout.steps[-1] if rollout.steps else None
    record: Record = {**_scalars(rollout.meta), **(_scalars(env_steps[-1].info) if env_steps else {})}
    record.update(_group_fields(rollout))
    record.update(
        {
            "total_reward": rollout.total_reward,
            "num_steps": len(rollout.steps),
            "num_env_steps": len(env_steps),
            "num_model_calls": len(agent_steps),
            "num_parse_errors": sum(1 for s in agent_steps if s.parse_error),
            "parse_error": any(s.parse_error for s in agent_steps),
            "reached_env": bool(env_steps),
            "terminated": bool(last is not None and last.terminated),
            "truncated": rollout.truncated,
            "truncation_reason": rollout.truncation_reason,
            "failed": rollout.failed,
            "failure_stage": rollout.failure.stage if rollout.failure else None,
            "failure_message": rollout.failure.message if rollout.failure else None,
        }
    )
    return record


def sample_records(rollout: Rollout) -> list[Record]:
    """One record per turn of the rollout (parse-failure turns included)."""
    if not rollout.steps:
        return []
    base = _group_fields(rollout)
    out: list[Record] = []
    for turn in split_turns(rollout):
        final = turn.final_step
        last_call = turn.agent_steps[-1]
        record: Record = {**_scalars(final.info), **base}
        record.update(
            {
                "turn_index": turn.index,
                "step_index": final.index,
                "step_kind": final.kind,
                "reward": final.reward,
                "parse_error": isinstance(final, AgentStep) and final.parse_error,
                "reached_env": isinstance(final, EnvironmentStep),
                "terminated": final.terminated,
                "truncated": final.truncated,
                "finish_reason": last_call.trace.finish_reason,
                "incomplete_completion": bool(last_call.info.get("incomplete_completion", False)),
                "completion_length": sum(len(s.trace.completion_token_ids) for s in turn.agent_steps),
                "failed": rollout.failed,
            }
        )
        out.append(record)
    return out


@runtime_checkable
class MetricReducer(Protocol):
    @property
    def name(self) -> str: ...

    def reduce(self, samples: Sequence[Record], rollouts: Sequence[Record]) -> float | None: ...


def _value(record: Record, key: str | Callable[[Record], Any], name: str) -> float:
    raw = key(record) if callable(key) else record.get(key)
    if raw is None:
        return 0.0
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, (int, float)) and math.isfinite(raw):
        return float(raw)
    raise DataError(
        f"reducer {name!r}: value {raw!r} of record {record.get('rollout_id')!r} is not a finite number or bool"
    )


@attrs.frozen
class Reducer:
    """``aggregate`` of ``key`` over every record of kind ``over``.

    * ``mean`` — sum of values / number of records (missing or None values count as 0);
    * ``rate`` — fraction of records whose value is truthy;
    * ``sum`` — sum of values.

    ``key`` is a record field name or a function of the record. An empty record set gives ``None``
    for mean and rate.
    """

    name: str
    key: str | Callable[[Record], Any]
    aggregate: Literal["mean", "sum", "rate"] = "mean"
    over: Literal["samples", "rollouts"] = "rollouts"

    def __attrs_post_init__(self) -> None:
        if self.aggregate not in ("mean", "sum", "rate"):
            raise ConfigError(
                f"Reducer {self.name!r}: aggregate must be mean, sum or rate, got {self.aggregate!r}"
            )
        if self.over not in ("samples", "rollouts"):
            raise ConfigError(
                f"Reducer {self.name!r}: over must be 'samples' or 'rollouts', got {self.over!r}"
            )

    def reduce(self, samples: Sequence[Record], rollouts: Sequence[Record]) -> float | None:
        records = samples if self.over == "samples" else rollouts
        if self.aggregate == "rate":
            values = [1.0 if _value(r, self.key, self.name) else 0.0 for r in records]
        else:
            values = [_value(r, self.key, self.name) for r in records]
        if self.aggregate == "sum":
            return math.fsum(values)
        return math.fsum(values) / len(values) if values else None


def _groups(rollouts: Sequence[Record], name: str, k: int) -> list[list[Record]]:
    groups: dict[tuple[Any, Any], list[Record]] = {}
    for record in rollouts:
        if record.get("group_id") is None:
            raise DataError(
                f"{name}: rollout {record.get('rollout_id')!r} has no group_id; expand the requests with "
                "GRPORequestStrategy(group_size >= k)"
            )
        groups.setdefault((record["group_id"], record.get("agent_id")), []).append(record)
    small = [(gid, len(members)) for gid, members in groups.items() if len(members) < k]
    if small:
        raise DataError(f"{name}: groups need at least k={k} rollouts; {small[0][0]} has {small[0][1]}")
    return list(groups.values())


@attrs.frozen
class _GroupMetric(abc.ABC):
    """A metric of ``key`` over groups of at least ``k`` rollouts: the mean over groups of each
    group's score, named ``<prefix>@<k>`` unless ``name`` is given."""

    key: str | Callable[[Record], Any]
    k: int
    name: str = ""
    prefix: ClassVar[str]

    def __attrs_post_init__(self) -> None:
        check_int(f"{type(self).__name__}.k", self.k, 1)
        if not self.name:
            object.__setattr__(self, "name", f"{self.prefix}@{self.k}")

    def reduce(self, samples: Sequence[Record], rollouts: Sequence[Record]) -> float | None:
        groups = _groups(rollouts, self.name, self.k)
        if not groups:
            return None
        return math.fsum(self.group_score(members) for members in groups) / len(groups)

    @abc.abstractmethod
    def group_score(self, members: list[Record]) -> float: ...


@attrs.frozen
class PassAtK(_GroupMetric):
    """Unbiased pass@k (Chen et al., 2021) averaged over groups: for a group of ``n`` rollouts of which
    ``c`` succeed (``key`` truthy), ``1 - C(n - c, k) / C(n, k)``. Failed and unparsed rollouts are
    failures, never skipped."""

    prefix: ClassVar[str] = "pass"

    def group_score(self, members: list[Record]) -> float:
        n = len(members)
        c = sum(1 for r in members if _value(r, self.key, self.name))
        return 1.0 - math.comb(n - c, self.k) / math.comb(n, self.k)


@attrs.frozen
class MeanAtK(_GroupMetric):
    """mean@k: the expected mean of ``key`` over k rollouts of a group, averaged over groups. With
    ``n >= k`` rollouts per group the unbiased estimate is the group's mean over all ``n``."""

    prefix: ClassVar[str] = "mean"

    def group_score(self, members: list[Record]) -> float:
        return math.fsum(_value(r, self.key, self.name) for r in members) / len(members)


def standard_reducers() -> list[MetricReducer]:
    """Reward, parse-error, truncation and failure rates that every eval should report."""
    return [
        Reducer("reward_mean", "total_reward", "mean", "rollouts"),
        Reducer("parse_error_rate", "parse_error", "rate", "samples"),
        Reducer("rollout_parse_error_rate", "parse_error", "rate", "rollouts"),
        Reducer("truncated_rate", "truncated", "rate", "rollouts"),
        Reducer("failure_rate", "failed", "rate", "rollouts"),
        Reducer("completion_length_mean", "completion_length", "mean", "samples"),
    ]


@attrs.frozen
class EvalResult:
    rollouts: list[Record]
    samples: list[Record]
    metrics: dict[str, float | int | None]
    episodes: tuple[EpisodeResult, ...] = attrs.field(repr=False)

    def __repr__(self) -> str:
        # The metrics and the record counts: the records themselves run to megabytes, and
        # run_eval_sync's asyncio.run builds the repr of what it returns (Python 3.11 and 3.12).
        return f"EvalResult(metrics={self.metrics!r}, <{len(self.rollouts)} rollouts>, <{len(self.samples)} samples>)"


async def run_eval(
    engine: RolloutEngine,
    requests: Sequence[RolloutRequest],
    reducers: Sequence[MetricReducer],
    settings: RolloutSettings,
    *,
    progress: ProgressCallback | None = None,
) -> EvalResult:
    """Run ``requests`` as ``settings`` says and reduce every rollout and turn to ``metrics``.

    Metrics always include ``num_episodes``, ``num_rollouts``, ``num_samples`` and
    ``num_failed_episodes``; reducer names must be distinct and must not clash with those.
    """
    names = [r.name for r in reducers]
    reserved = {"num_episodes", "num_rollouts", "num_samples", "num_failed_episodes"}
    clash = sorted({n for n in names if names.count(n) > 1} | (set(names) & reserved))
    if clash:
        raise ConfigError(
            f"run_eval: reducer names must be unique and not in {sorted(reserved)}; got {clash}"
        )
    total = len(requests)
    done = 0

    def on_episode_done(_episode: EpisodeResult) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    result = await engine.generate_rollouts(
        requests,
        settings,
        on_episode_done=on_episode_done,
    )
    failed_ids = {r.id for e in result.failed_episodes for r in e.rollouts}
    rollouts: list[Record] = []
    samples: list[Record] = []
    for rollout in result.rollouts:
        record = rollout_record(rollout)
        record["failed"] = record["failed"] or rollout.id in failed_ids
        rollouts.append(record)
        samples.extend(sample_records(rollout))
    metrics: dict[str, float | int | None] = {
        "num_episodes": len(result.episodes),
        "num_rollouts": len(rollouts),
        "num_samples": len(samples),
        "num_failed_episodes": len(result.failed_episodes),
    }
    for reducer in reducers:
        metrics[reducer.name] = reducer.reduce(samples, rollouts)
    return EvalResult(rollouts=rollouts, samples=samples, metrics=metrics, episodes=result.episodes)


def run_eval_sync(
    engine: RolloutEngine,
    requests: Sequence[RolloutRequest],
    reducers: Sequence[MetricReducer],
    settings: RolloutSettings,
    *,
    progress: ProgressCallback | None = None,
) -> EvalResult:
    """:func:`run_eval` for scripts and notebooks without a running event loop."""
    return asyncio.run(run_eval(engine, requests, reducers, settings, progress=progress))
