"""Rollout requests: what to run, with which seeds, and how to sample.

A :class:`RolloutRequest` describes one episode. Env and protocol are given as specs (a kind plus
keyword arguments) so that the engine can build a *fresh* env and protocol for every episode: the kind
is resolved through the engine's explicit factories first, then through :mod:`ludic_core.registry`.
A spec may also carry its own ``factory`` callable for one-off components that are not registered.

Seeds left as ``None`` are filled in by the engine from a counter that never restarts (see
:class:`~ludic_core.engine.RolloutEngine`); explicit seeds make a run reproducible bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.inference import InferenceSpec
from ludic_core.seeding import MAX_SEED
from ludic_core.validation import int_at_least

__all__ = ["RESERVED_META_KEYS", "EnvSpec", "ProtocolSpec", "RolloutRequest"]

RESERVED_META_KEYS: frozenset[str] = frozenset(
    {
        # set by the interaction protocols
        "protocol",
        "agents",
        "agent_id",
        "env_name",
        "episode_truncated",
        "truncation_reason",
        "ended_by",
        "unattributed_reward",
        # set by the engine
        "request_meta",
        "engine",
        "episode_index",
    }
)
"""Rollout meta keys owned by the protocol or the engine; request meta may not use them."""


def _check_kind(instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{type(instance).__name__}.kind must be a non-empty str, got {value!r}")


def _check_factory(instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise ConfigError(f"{type(instance).__name__}.factory must be callable or None, got {value!r}")


def _str_keyed(name: str, value: object) -> dict[str, Any]:
    """``value`` as a dict: None is empty; anything else must be a mapping with str keys."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a mapping, got {type(value).__name__}: {value!r}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{name} keys must be str, got {bad[0]!r}")
    return dict(value)


def _kwargs(value: object, instance: Any) -> dict[str, Any]:
    return _str_keyed(f"{type(instance).__name__}.kwargs", value)


@attrs.frozen
class _ComponentSpec:
    """A component of an episode: ``kind`` names a registered one (or labels ``factory``), built with
    ``kwargs``."""

    kind: str = attrs.field(validator=_check_kind)
    # takes_self: errors name the subclass. mypy's attrs plugin does not read a Converter.
    kwargs: dict[str, Any] = attrs.field(
        factory=dict,
        converter=attrs.Converter(_kwargs, takes_self=True),  # type: ignore[misc]
    )
    factory: Callable[..., Any] | None = attrs.field(
        default=None, validator=_check_factory, eq=False, repr=False
    )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "kwargs": dict(self.kwargs)}


@attrs.frozen
class EnvSpec(_ComponentSpec):
    """How to build the env of one episode: ``kind`` names a registered env (or labels ``factory``)."""


@attrs.frozen
class ProtocolSpec(_ComponentSpec):
    """How to build the protocol (and with it the agents) of one episode."""


def _meta(value: object) -> dict[str, Any]:
    meta = _str_keyed("RolloutRequest.meta", value)
    reserved = sorted(set(meta) & RESERVED_META_KEYS)
    if reserved:
        raise ConfigError(
            f"RolloutRequest.meta uses reserved keys {reserved}; the protocol and the engine own "
            f"{sorted(RESERVED_META_KEYS)}"
        )
    return meta


@attrs.frozen
class RolloutRequest:
    """One episode to run.

    ``env_seed`` seeds ``env.reset``; ``sampling_seed`` seeds the model calls (the protocol derives a
    seed per agent and per call from it). ``inference`` defaults to :class:`InferenceSpec()`. ``meta``
    is copied into the meta of every rollout of the episode (top level and under ``request_meta``);
    it must be JSON-serialisable and must not use :data:`RESERVED_META_KEYS`.
    """

    env: EnvSpec
    protocol: ProtocolSpec
    env_seed: int | None = attrs.field(
        default=None, validator=int_at_least(0, maximum=MAX_SEED, optional=True)
    )
    sampling_seed: int | None = attrs.field(
        default=None, validator=int_at_least(0, maximum=MAX_SEED, optional=True)
    )
    inference: InferenceSpec | None = None
    meta: dict[str, Any] = attrs.field(factory=dict, converter=_meta)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.env, EnvSpec):
            raise ConfigError(f"RolloutRequest.env must be an EnvSpec, got {self.env!r}")
        if not isinstance(self.protocol, ProtocolSpec):
            raise ConfigError(f"RolloutRequest.protocol must be a ProtocolSpec, got {self.protocol!r}")
        if self.inference is not None and not isinstance(self.inference, InferenceSpec):
            raise ConfigError(
                f"RolloutRequest.inference must be an InferenceSpec or None, got {self.inference!r}"
            )

    def with_changes(self, **changes: Any) -> RolloutRequest:
        """A copy with some fields replaced (validated again)."""
        return attrs.evolve(self, **changes)
