"""JSON (de)serialisation of rollouts.

``rollout_from_dict(rollout_to_dict(r)) == r`` holds exactly for any rollout whose ``info``/``meta``
values are JSON (lists rather than tuples). The format is versioned so that old logs stay readable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ludic_core.errors import DataError
from ludic_core.jsonl import loads_object
from ludic_core.types import AgentStep, EnvironmentStep, EpisodeFailure, Rollout, Step, TokenTrace

__all__ = [
    "ROLLOUT_SCHEMA_VERSION",
    "rollout_from_dict",
    "rollout_from_json",
    "rollout_to_dict",
    "rollout_to_json",
    "step_from_dict",
    "step_to_dict",
]

ROLLOUT_SCHEMA_VERSION = 1

_STEP_TYPES: dict[str, type[AgentStep] | type[EnvironmentStep]] = {"agent": AgentStep, "env": EnvironmentStep}


def step_to_dict(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": step.kind}
    for field in attrs.fields(type(step)):
        if field.name == "kind":
            continue
        value = getattr(step, field.name)
        if field.name == "trace":
            value = value.to_dict()
        elif field.name in ("tool_calls", "tool_results"):
            value = None if value is None else [v.to_dict() for v in value]
        elif field.name in ("prompt_messages", "agent_step_ids"):
            value = list(value)
        out[field.name] = value
    return out


def step_from_dict(data: Mapping[str, Any]) -> Step:
    kind = data.get("kind")
    cls = _STEP_TYPES.get(str(kind))
    if cls is None:
        raise DataError(f"step 'kind' must be 'agent' or 'env', got {kind!r}")
    kwargs = {k: v for k, v in data.items() if k != "kind"}
    if "trace" not in kwargs:
        raise DataError(f"{kind} step {data.get('id')!r} has no 'trace'")
    kwargs["trace"] = TokenTrace.from_dict(kwargs["trace"])
    known = {f.name for f in attrs.fields(cls) if f.init}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise DataError(f"{kind} step has unknown fields {unknown}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise DataError(f"cannot build a {kind} step from {sorted(kwargs)}: {exc}") from exc


def rollout_to_dict(rollout: Rollout) -> dict[str, Any]:
    return {
        "schema_version": ROLLOUT_SCHEMA_VERSION,
        "id": rollout.id,
        "meta": rollout.meta,
        "failure": None if rollout.failure is None else rollout.failure.to_dict(),
        "steps": [step_to_dict(s) for s in rollout.steps],
        # Derived, for people reading logs; ignored when loading.
        "total_reward": rollout.total_reward,
    }


def rollout_from_dict(data: Mapping[str, Any]) -> Rollout:
    version = data.get("schema_version", ROLLOUT_SCHEMA_VERSION)
    if version != ROLLOUT_SCHEMA_VERSION:
        raise DataError(
            f"rollout schema_version {version!r} is not supported (expected {ROLLOUT_SCHEMA_VERSION})"
        )
    if "steps" not in data:
        raise DataError(f"rollout {data.get('id')!r} has no 'steps'")
    failure = data.get("failure")
    return Rollout(
        id=str(data["id"]),
        meta=dict(data.get("meta") or {}),
        failure=None if failure is None else EpisodeFailure(**failure),
        steps=[step_from_dict(s) for s in data["steps"]],
    )


def rollout_to_json(rollout: Rollout) -> str:
    """One line of JSON (no newlines), suitable for JSONL logs."""
    return json.dumps(rollout_to_dict(rollout), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def rollout_from_json(line: str) -> Rollout:
    return rollout_from_dict(loads_object(line, "rollout"))
