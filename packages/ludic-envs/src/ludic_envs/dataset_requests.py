"""Turn a dataset into a resumable stream of :class:`~ludic_core.requests.RolloutRequest`.

Order is sequential or shuffled with a seed (a fresh, reproducible permutation each pass), one pass
or looping forever, optionally expanded into GRPO groups. The position is two integers (pass, offset)
plus the strategy's RNG state, so :meth:`DatasetRequestStream.state_dict` checkpoints it exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.inference import InferenceSpec
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy, RequestStrategy
from ludic_core.validation import check_int

__all__ = ["BuildRequest", "DatasetRequestStream", "indexed_env_requests"]

BuildRequest = Callable[[int, Mapping[str, Any], int], RolloutRequest]
"""``(row_index, row, env_seed) -> RolloutRequest`` for one base episode."""


def indexed_env_requests(
    env_kind: str,
    protocol: ProtocolSpec,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    inference: InferenceSpec | None = None,
    meta: Mapping[str, Any] | None = None,
) -> BuildRequest:
    """A builder whose env spec names the row by ``index`` (e.g. ``gsm8k`` with ``data_files``), so
    requests stay small and each worker reads the row from its per-process dataset cache."""
    base_kwargs = dict(env_kwargs or {})
    if "index" in base_kwargs or "sample" in base_kwargs:
        raise ConfigError("env_kwargs must not set 'index' or 'sample'; the stream sets the row index")

    def build(index: int, row: Mapping[str, Any], env_seed: int) -> RolloutRequest:
        return RolloutRequest(
            env=EnvSpec(env_kind, {**base_kwargs, "index": index}),
            protocol=protocol,
            env_seed=env_seed,
            inference=inference,
            meta={**(meta or {}), "sample_index": index},
        )

    return build


@attrs.define
class DatasetRequestStream:
    """Rows → requests. ``group_size > 1`` wraps every base request in a GRPO group (shared env seed,
    distinct sampling seeds, a ``group_id``) through :class:`~ludic_core.strategies.GRPORequestStrategy`
    unless a ``strategy`` is given. Each base request's env seed is derived from ``seed``, the pass and
    the row, so the same row gets a new seed on every pass."""

    rows: Sequence[Mapping[str, Any]]
    build_request: BuildRequest
    shuffle: bool = False
    seed: int = 0
    loop: bool = False
    group_size: int = 1
    strategy: RequestStrategy | None = None
    _epoch: int = attrs.field(default=0, init=False)
    _offset: int = attrs.field(default=0, init=False)
    _order: list[int] = attrs.field(factory=list, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if len(self.rows) == 0:
            raise ConfigError("DatasetRequestStream needs at least one row")
        check_int("DatasetRequestStream.group_size", self.group_size, 1)
        if self.strategy is None and self.group_size > 1:
            self.strategy = GRPORequestStrategy(self.group_size, seed=derive_seed(self.seed, "grpo"))
        self._order = self._order_for(0)

    def _order_for(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        if self.shuffle:
            random.Random(derive_seed(self.seed, "order", epoch)).shuffle(order)
        return order

    @property
    def exhausted(self) -> bool:
        """True once a non-looping stream has handed out every row."""
        return not self.loop and self._offset >= len(self.rows)

    def _next_index(self) -> tuple[int, int] | None:
        if self._offset >= len(self.rows):
            if not self.loop:
                return None
            self._epoch += 1
            self._offset = 0
            self._order = self._order_for(self._epoch)
        index = self._order[self._offset]
        self._offset += 1
        return index, self._epoch

    def next_requests(self, num_rows: int) -> list[RolloutRequest]:
        """Requests for the next ``num_rows`` rows (``num_rows × group_size`` requests); fewer, or
        none, once a non-looping stream runs out."""
        check_int("num_rows", num_rows, 0)
        base: list[RolloutRequest] = []
        for _ in range(num_rows):
            nxt = self._next_index()
            if nxt is None:
                break
            index, epoch = nxt
            base.append(
                self.build_request(index, self.rows[index], derive_seed(self.seed, "row", epoch, index))
            )
        return self.strategy.expand(base) if self.strategy is not None else base

    def __iter__(self) -> Iterator[RolloutRequest]:
        while True:
            batch = self.next_requests(1)
            if not batch:
                return
            yield from batch

    def state_dict(self) -> dict[str, Any]:
        """The position (plain JSON types, so it can go in a JSON checkpoint as is)."""
        state: dict[str, Any] = {
            "epoch": self._epoch,
            "offset": self._offset,
            "num_rows": len(self.rows),
            "shuffle": self.shuffle,
            "seed": self.seed,
        }
        state_fn = getattr(self.strategy, "state_dict", None)
        if callable(state_fn):
            state["strategy"] = state_fn()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where ``state`` was taken (same rows, order settings and seed required); accepts the
        state as returned or after a JSON round trip."""
        for key, mine in (("num_rows", len(self.rows)), ("shuffle", self.shuffle), ("seed", self.seed)):
            if state.get(key) != mine:
                raise ConfigError(f"stream state has {key}={state.get(key)!r}, this stream has {mine!r}")
        for key in ("epoch", "offset"):
            check_int(f"stream state {key}", state.get(key), 0)
        self._epoch = int(state["epoch"])
        self._offset = int(state["offset"])
        self._order = self._order_for(self._epoch)
        load_fn = getattr(self.strategy, "load_state_dict", None)
        if "strategy" in state and callable(load_fn):
            load_fn(state["strategy"])
