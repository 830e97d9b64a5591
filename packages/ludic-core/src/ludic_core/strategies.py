"""Request strategies: intra-batch control over which episodes run.

A strategy expands a list of base requests into the requests the engine runs. :class:`IdentityStrategy`
runs them as given; :class:`GRPORequestStrategy` turns each into a group of ``group_size`` episodes of
the *same* problem (shared env seed) answered with *different* samples (distinct sampling seeds), which
is what group-relative credit (:class:`~ludic_core.credit.GroupNormalizedReturn`) compares.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_core.errors import ConfigError
from ludic_core.requests import RolloutRequest
from ludic_core.seeding import MAX_SEED, random_state_from_json, random_state_to_json
from ludic_core.validation import check_int

__all__ = ["GRPORequestStrategy", "IdentityStrategy", "RequestStrategy"]


@runtime_checkable
class RequestStrategy(Protocol):
    def expand(self, requests: Sequence[RolloutRequest]) -> list[RolloutRequest]: ...


@attrs.frozen
class IdentityStrategy:
    """Runs the requests as given."""

    def expand(self, requests: Sequence[RolloutRequest]) -> list[RolloutRequest]:
        return list(requests)


@attrs.define
class GRPORequestStrategy:
    """``group_size`` copies of every request, sharing an env seed and a ``group_id``.

    Copy ``i`` of a group gets ``sampling_seed = base + i`` (mod 2**31), where ``base`` is the request's
    own sampling seed or a draw from the strategy's RNG; the env seed is the request's own or a draw.
    ``group_id`` values are drawn from the same RNG, so the strategy is reproducible from ``seed`` and
    successive calls keep drawing new values (no seed or id repeats because a call restarted).
    Request meta gains ``group_id``, ``group_index`` (``i``) and ``group_size``.
    """

    group_size: int
    seed: int = 0
    _rng: random.Random = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        group_size: object = self.group_size
        check_int("GRPORequestStrategy.group_size", group_size, 1)
        check_int("GRPORequestStrategy.seed", self.seed)
        self._rng = random.Random(self.seed)

    def expand(self, requests: Sequence[RolloutRequest]) -> list[RolloutRequest]:
        out: list[RolloutRequest] = []
        for request in requests:
            for key in ("group_id", "group_index", "group_size"):
                if key in request.meta:
                    raise ConfigError(
                        f"request meta already has {key}={request.meta[key]!r}; GRPORequestStrategy assigns "
                        "groups itself (expand each base request once)"
                    )
            env_seed = request.env_seed if request.env_seed is not None else self._rng.randint(0, MAX_SEED)
            base = (
                request.sampling_seed if request.sampling_seed is not None else self._rng.randint(0, MAX_SEED)
            )
            group_id = f"{self._rng.getrandbits(64):016x}"
            for i in range(self.group_size):
                out.append(
                    request.with_changes(
                        env_seed=env_seed,
                        sampling_seed=(base + i) % (MAX_SEED + 1),
                        meta={
                            **request.meta,
                            "group_id": group_id,
                            "group_index": i,
                            "group_size": self.group_size,
                        },
                    )
                )
        return out

    def state_dict(self) -> dict[str, Any]:
        """The RNG state, for resuming a run exactly where it stopped (plain JSON types)."""
        return {
            "group_size": self.group_size,
            "seed": self.seed,
            "rng_state": random_state_to_json(self._rng),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Accepts :meth:`state_dict` as returned or after a JSON round trip."""
        if state.get("group_size") != self.group_size:
            raise ConfigError(
                f"state is for group_size={state.get('group_size')!r}, this strategy has {self.group_size}"
            )
        self._rng.setstate(
            random_state_from_json(state.get("rng_state"), field="GRPORequestStrategy state rng_state")
        )
