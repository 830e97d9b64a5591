"""The rollout engine: requests in, rollouts (or SAW batches) out.

For every episode the engine builds a **fresh** env and a fresh protocol (and with it the agents and
their contexts), runs it under a per-episode timeout, and stamps the rollouts' meta:

* the request meta, merged in at top level and kept whole under ``request_meta``;
* ``episode_index`` (the engine's running episode counter);
* an ``engine`` block: max_steps, timeouts, env/protocol kinds, the seeds used and where they came
  from, the return spec.

Seeds. A request's explicit seeds are used as given. Missing seeds come from a counter that the engine
keeps across calls, starting at ``base_seed``: successive calls never reuse a default seed (the
original restarted them at 0 every batch), and a fresh engine with the same ``base_seed`` given the
same calls reproduces the same seeds, hence the same rollouts with deterministic envs and clients.

Failures. A protocol reports env, agent and client failures on its rollouts (``Rollout.failure``);
the engine adds timeouts and crashes of the protocol itself. ``on_failure="raise"`` cancels the rest of
the batch at the first failure and raises :class:`~ludic_core.errors.EpisodeError`;
``on_failure="continue"`` keeps going and reports every failed episode in the result, unless more than
``max_failure_rate`` of the call's episodes failed: then it raises :class:`~ludic_core.errors.EpisodeError`
naming the first failure once every episode has run and been logged. Failed episodes never produce SAW
items. A :class:`~ludic_core.errors.ConfigError` or :class:`~ludic_core.errors.MissingExtraError` raised
while building an env or protocol is not an episode failure: it would fail every episode, so it ends the
call at once.

Settings. How episodes run (``max_steps``, ``concurrency``, the timeouts and ``on_failure``) is one
:class:`~ludic_core.rollout_settings.RolloutSettings` value given to each call; the batch source,
evaluation and the pipeline actor pass the same value through.

Scheduling. A call runs ``concurrency`` worker tasks; each takes the next request (in request order)
when its episode ends, so at most ``concurrency`` episodes are in flight and no task exists for an
episode that has not started. The episodes a worker runs share its context: a context variable an
episode sets must be reset by it (as ``with`` blocks and ``ContextVar.reset`` do), or the worker's next
episode sees it.

Workers. ``settings.workers > 1`` runs the episodes in spawned processes (:mod:`ludic_core.rollout_workers`),
which stay up between calls with the same count and stop on an error, a cancellation or :meth:`close`.

Timeouts. Every wait is bounded by default: each model call by ``timeout_s`` (default
:data:`DEFAULT_MODEL_CALL_TIMEOUT_S`) and each episode by ``episode_timeout_s`` (default
:data:`DEFAULT_EPISODE_TIMEOUT_S`). An env whose
``step`` blocks must set ``blocking_step`` (see :class:`~ludic_core.env.LudicEnv`), or a stuck step
holds the event loop and no timeout can fire.
"""

from __future__ import annotations

import asyncio
import functools
import pickle
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ludic_core import rollout_workers
from ludic_core.call_timeout import call_timeout
from ludic_core.credit import CreditAssigner
from ludic_core.env import LudicEnv
from ludic_core.errors import ConfigError, EpisodeError, LudicTimeoutError, MissingExtraError
from ludic_core.filters import SampleFilter, apply_filter
from ludic_core.ids import seeded_ids
from ludic_core.inference import InferenceSpec
from ludic_core.logs import get_logger
from ludic_core.protocols.base import InteractionProtocol
from ludic_core.protocols.standard import StandardProtocolFactory, _short_repr
from ludic_core.registry import ENVS, PROTOCOLS, Registry
from ludic_core.requests import RolloutRequest
from ludic_core.rollout_log import RolloutLog
from ludic_core.rollout_results import EpisodeResult, RolloutResult
from ludic_core.rollout_settings import (
    DEFAULT_EPISODE_TIMEOUT_S,
    DEFAULT_MODEL_CALL_TIMEOUT_S,
    FailurePolicy,
    RolloutSettings,
)
from ludic_core.rollout_workers import RolloutWorkerPool
from ludic_core.saw import SAWBatch
from ludic_core.seeding import MAX_SEED, derive_seed
from ludic_core.trainable import credited_items, select_trainable_rollouts
from ludic_core.types import EpisodeFailure, Rollout
from ludic_core.validation import check_int

__all__ = [
    "DEFAULT_EPISODE_TIMEOUT_S",
    "DEFAULT_MODEL_CALL_TIMEOUT_S",
    "EpisodeResult",
    "FailurePolicy",
    "RolloutEngine",
    "RolloutResult",
    "RolloutSettings",
    "rollouts_to_batch",
    "select_trainable_rollouts",
]

log = get_logger(__name__)

# The spec of requests that give none. Shared: an InferenceSpec is frozen, and nothing changes its
# extensions mapping.
_DEFAULT_INFERENCE = InferenceSpec()


_EXPECTED = {
    "env_factories": (
        "a callable returning a fresh LudicEnv per episode, e.g. `lambda: TicTacToeEnv()` or the class itself"
    ),
    "protocol_factories": (
        "a callable returning a fresh InteractionProtocol per episode, e.g. "
        "`lambda: SingleAgentProtocol(Agent(client=client, parser=parser))`"
    ),
}


def _check_factories(mapping_name: str, factories: object) -> dict[str, Callable[..., Any]]:
    """Validate a name -> factory mapping when the engine is built, not at the first episode.

    The engine calls each factory once per episode; an already-built env or protocol would be shared by
    every episode (or fail only once the first episode starts), so instances are rejected even when
    their class happens to define ``__call__``.
    """
    if factories is None:
        return {}
    if not isinstance(factories, Mapping):
        raise ConfigError(
            f"RolloutEngine.{mapping_name} must be a mapping of name -> factory, got "
            f"{type(factories).__name__}: {_short_repr(factories)}"
        )
    expected = _EXPECTED[mapping_name]
    out: dict[str, Callable[..., Any]] = {}
    for key, factory in factories.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(
                f"RolloutEngine.{mapping_name} keys must be non-empty str (the kind a spec names), got "
                f"{type(key).__name__}: {_short_repr(key)}"
            )
        built = next((c for c in (LudicEnv, InteractionProtocol) if isinstance(factory, c)), None)
        if built is not None or not callable(factory):
            what = f"an already-built {built.__name__} instance" if built is not None else "not callable"
            raise ConfigError(
                f"RolloutEngine.{mapping_name}[{key!r}] is {what} ({type(factory).__name__}: "
                f"{_short_repr(factory)}); expected {expected}"
            )
        out[key] = factory
    return out


def _resolve(
    kind: str,
    own: Callable[..., Any] | None,
    explicit: Mapping[str, Callable[..., Any]],
    registry: Registry[Any],
    kwargs: Mapping[str, Any],
) -> Callable[..., Any]:
    if own is not None:
        return own
    factory = explicit[kind] if kind in explicit else registry.get(kind)  # RegistryError names known kinds
    if isinstance(factory, StandardProtocolFactory):
        # A missing agent factory would otherwise fail every episode; say how to provide one up front.
        factory.check_kwargs(kwargs)
    return factory


class RolloutEngine:
    """Runs :class:`RolloutRequest`s; see the module docstring for seeds, meta and failures.

    ``env_factories``/``protocol_factories`` map kinds to factories and take precedence over the
    global registry. ``rollout_log`` (a path or a :class:`RolloutLog`) appends every rollout as JSONL.
    How the episodes of a call run is the :class:`RolloutSettings` given to that call.

    ``worker_engine`` is how worker processes (``RolloutSettings.workers > 1``) build their engine: a
    picklable callable returning a :class:`RolloutEngine` (or an async context manager yielding one)
    with the same ``base_seed`` and ``deterministic_ids``. Without it, workers rebuild this engine from
    its factories, which must then pickle.
    """

    def __init__(
        self,
        *,
        env_factories: Mapping[str, Callable[..., LudicEnv[Any]]] | None = None,
        protocol_factories: Mapping[str, Callable[..., InteractionProtocol]] | None = None,
        base_seed: int = 0,
        rollout_log: RolloutLog | str | Path | None = None,
        deterministic_ids: bool = False,
        worker_engine: Callable[[], Any] | None = None,
    ) -> None:
        check_int("RolloutEngine.base_seed", base_seed, 0, maximum=MAX_SEED)
        self.env_factories = _check_factories("env_factories", env_factories)
        self.protocol_factories = _check_factories("protocol_factories", protocol_factories)
        self.base_seed = base_seed
        # Off by default: uuid4 ids are unique across runs. On, a rerun with the same base seed and
        # requests reproduces every id (ids are then unique within a run only).
        self.deterministic_ids = deterministic_ids
        self.rollout_log = (
            rollout_log
            if isinstance(rollout_log, RolloutLog) or rollout_log is None
            else RolloutLog(rollout_log)
        )
        self._episodes_started = 0
        if worker_engine is not None and not callable(worker_engine):
            raise ConfigError(f"RolloutEngine.worker_engine must be callable or None, got {worker_engine!r}")
        self.worker_engine = worker_engine
        self._pool: RolloutWorkerPool | None = None

    # -- state -------------------------------------------------------------------------------------

    @property
    def episodes_started(self) -> int:
        """How many episodes this engine has scheduled so far (the next default-seed offset)."""
        return self._episodes_started

    def state_dict(self) -> dict[str, int]:
        return {"base_seed": self.base_seed, "episodes_started": self._episodes_started}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume the default-seed counter of a previous run (same ``base_seed`` required)."""
        if state.get("base_seed") != self.base_seed:
            raise ConfigError(
                f"state has base_seed={state.get('base_seed')!r}, this engine has {self.base_seed}"
            )
        self._episodes_started = check_int("state episodes_started", state.get("episodes_started"), 0)

    def _default_seed(self, episode_index: int) -> int:
        return (self.base_seed + episode_index) % (MAX_SEED + 1)

    # -- rollouts ----------------------------------------------------------------------------------

    async def generate_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        settings: RolloutSettings,
        *,
        on_episode_done: Callable[[EpisodeResult], None | Awaitable[None]] | None = None,
    ) -> RolloutResult:
        """Run one episode per request, as ``settings`` says.

        ``on_episode_done`` is called as each episode finishes (progress bars).
        """
        settings = RolloutSettings.coerce(settings, owner="generate_rollouts(settings)")
        on_failure = settings.on_failure
        for i, request in enumerate(requests):
            if not isinstance(request, RolloutRequest):
                raise ConfigError(f"requests[{i}] must be a RolloutRequest, got {type(request).__name__}")
        pool = await self._worker_pool(settings.workers) if requests else None
        # Resolve every kind up front: an unknown kind is a config error, not an episode failure. (With
        # workers, each worker resolves them in its own engine, and raises the same error.)
        factories = [
            (
                _resolve(r.env.kind, r.env.factory, self.env_factories, ENVS, r.env.kwargs),
                _resolve(
                    r.protocol.kind, r.protocol.factory, self.protocol_factories, PROTOCOLS, r.protocol.kwargs
                ),
            )
            for r in (requests if pool is None else ())
        ]
        first_index = self._episodes_started
        self._episodes_started += len(requests)
        # What every rollout's ``engine`` meta records about how it ran.
        run_settings = {
            "max_steps": settings.max_steps,
            "timeout_s": settings.timeout_s,
            "episode_timeout_s": settings.episode_timeout_s,
        }
        results: list[EpisodeResult | None] = [None] * len(requests)
        # Episodes start in request order: each worker takes the next index when its episode ends.
        next_index = iter(range(len(requests)))

        async def worker() -> None:
            for i in next_index:
                if pool is None:
                    episode = await self._run_episode(
                        first_index + i, requests[i], *factories[i], run_settings
                    )
                else:
                    fields = await pool.run_episode(first_index + i, requests[i], run_settings)
                    episode = EpisodeResult(first_index + i, requests[i], *fields)  # the caller's request
                results[i] = episode
                if self.rollout_log is not None:
                    await asyncio.to_thread(self.rollout_log.write, episode.rollouts)
                if on_episode_done is not None:
                    maybe = on_episode_done(episode)
                    if maybe is not None:
                        await maybe
                if episode.failure is not None and on_failure == "raise":
                    f = episode.failure
                    raise EpisodeError(
                        f"episode {episode.episode_index} (env {episode.request.env.kind!r}, env_seed "
                        f"{episode.env_seed}) failed in stage {f.stage!r}: {f.error_type}: {f.message}; "
                        "pass on_failure='continue' to keep the other episodes"
                    )

        # ``concurrency`` long-lived workers, not a task per episode behind a semaphore: tasks for
        # every episode, created up front, held every pending episode's task in memory at once and
        # cost ~30 µs per episode (task creation, semaphore waits, wake-ups) when the requests far
        # outnumber the slots.
        workers = [asyncio.ensure_future(worker()) for _ in range(min(settings.concurrency, len(requests)))]
        try:
            if workers:
                # The first task to raise (EpisodeError, a ConfigError from a factory) ends the call.
                # No timeout of its own: every episode is bounded by episode_timeout_s.
                await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
                for task in workers:
                    if task.done() and not task.cancelled():
                        task.result()  # re-raises what the worker raised
        except BaseException:
            # Episodes may still run in the workers (a failure under on_failure="raise", a
            # cancellation, Ctrl-C): stop them rather than leave them to finish unobserved.
            if pool is not None:
                self.close()
            raise
        finally:
            pending = [task for task in workers if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        assert all(r is not None for r in results)
        out = RolloutResult(episodes=tuple(r for r in results if r is not None))
        if out.failed_episodes:
            log.warning(
                "rollout_engine.episodes_failed",
                failed=len(out.failed_episodes),
                total=len(out.episodes),
                stages=dict(Counter(e.failure.stage for e in out.failed_episodes if e.failure)),
            )
            out.check_failure_rate(settings.max_failure_rate)
        return out

    async def _worker_pool(self, workers: int) -> RolloutWorkerPool | None:
        """The worker processes of a ``workers > 1`` call: the running ones when their count matches,
        else new ones (None, and any running ones stopped, for ``workers == 1``)."""
        pool = self._pool
        if pool is not None and pool.size == workers and pool.alive:
            return pool
        self.close()
        if workers == 1:
            return None
        pool = RolloutWorkerPool(
            self._worker_build(workers), workers, start_timeout_s=rollout_workers.DEFAULT_START_TIMEOUT_S
        )
        try:
            await pool.start(base_seed=self.base_seed, deterministic_ids=self.deterministic_ids)
        except BaseException:
            pool.close()
            raise
        self._pool = pool
        return pool

    def _worker_build(self, workers: int) -> Callable[[], Any]:
        """How each worker builds its engine: ``worker_engine``, or this engine's factories (each
        checked here, so a lambda is refused by name)."""
        if self.worker_engine is not None:
            return self.worker_engine
        for mapping_name in ("env_factories", "protocol_factories"):
            for kind, factory in getattr(self, mapping_name).items():
                try:
                    pickle.dumps(factory)
                except Exception as exc:
                    raise ConfigError(
                        f"RolloutSettings.workers={workers} rebuilds the engine in spawned processes, and "
                        f"RolloutEngine.{mapping_name}[{kind!r}] ({_short_repr(factory)}) cannot be pickled "
                        f"({type(exc).__name__}: {exc}); use a module-level function, a class or a "
                        "functools.partial of one, or give the engine a picklable worker_engine that builds "
                        "it (and its client) in each worker"
                    ) from exc
        return functools.partial(
            RolloutEngine,
            env_factories=self.env_factories,
            protocol_factories=self.protocol_factories,
            base_seed=self.base_seed,
            deterministic_ids=self.deterministic_ids,
        )

    def close(self) -> None:
        """Stop the worker processes of ``workers > 1`` calls, if any. They otherwise stay up for the
        next call, and stop when the engine is garbage-collected or the interpreter exits."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    async def _run_request(
        self, episode_index: int, request: RolloutRequest, settings: dict[str, Any]
    ) -> EpisodeResult:
        """One episode sent to this engine in a worker process (:mod:`ludic_core.rollout_workers`)."""
        env_factory = _resolve(
            request.env.kind, request.env.factory, self.env_factories, ENVS, request.env.kwargs
        )
        protocol_factory = _resolve(
            request.protocol.kind,
            request.protocol.factory,
            self.protocol_factories,
            PROTOCOLS,
            request.protocol.kwargs,
        )
        return await self._run_episode(episode_index, request, env_factory, protocol_factory, settings)

    async def _run_episode(
        self,
        episode_index: int,
        request: RolloutRequest,
        env_factory: Callable[..., Any],
        protocol_factory: Callable[..., Any],
        settings: dict[str, Any],
    ) -> EpisodeResult:
        env_seed = request.env_seed if request.env_seed is not None else self._default_seed(episode_index)
        sampling_seed = (
            request.sampling_seed if request.sampling_seed is not None else self._default_seed(episode_index)
        )
        inference = request.inference or _DEFAULT_INFERENCE
        started = time.perf_counter()
        # The coroutine runs when awaited, so inside the id scope when there is one; without one it is
        # awaited directly, not through a context manager that does nothing.
        run = self._run_protocol(
            episode_index,
            request,
            env_factory,
            protocol_factory,
            settings,
            env_seed,
            sampling_seed,
            inference,
        )
        if self.deterministic_ids:
            with seeded_ids(derive_seed(self.base_seed, "ids", episode_index, env_seed, sampling_seed)):
                rollouts, failure = await run
        else:
            rollouts, failure = await run
        engine_meta = {
            "episode_index": episode_index,
            **settings,
            "env_kind": request.env.kind,
            "protocol_kind": request.protocol.kind,
            "env_seed": env_seed,
            "sampling_seed": sampling_seed,
            "env_seed_source": "request" if request.env_seed is not None else "engine",
            "sampling_seed_source": "request" if request.sampling_seed is not None else "engine",
            "return_spec": {
                "return_chosen_logprobs": inference.return_.return_chosen_logprobs,
                "top_logprobs_k": inference.return_.top_logprobs_k,
            },
        }
        for position, rollout in enumerate(rollouts):
            # Each rollout gets its own meta dicts; the first takes the ones built for this episode.
            self._stamp(
                rollout, request, episode_index, engine_meta if position == 0 else _copy_meta(engine_meta)
            )
        return EpisodeResult._of(
            episode_index,
            request,
            env_seed,
            sampling_seed,
            tuple(rollouts),
            failure,
            time.perf_counter() - started,
        )

    @staticmethod
    async def _run_protocol(
        episode_index: int,
        request: RolloutRequest,
        env_factory: Callable[..., Any],
        protocol_factory: Callable[..., Any],
        settings: dict[str, Any],
        env_seed: int,
        sampling_seed: int,
        inference: InferenceSpec,
    ) -> tuple[list[Rollout], EpisodeFailure | None]:
        rollouts: list[Rollout]
        failure: EpisodeFailure | None = None
        try:
            stage = "env"
            env = env_factory(**request.env.kwargs)
            stage = "protocol"
            protocol = protocol_factory(**request.protocol.kwargs)
            run = protocol.run(
                env=env,
                max_steps=settings["max_steps"],
                env_seed=env_seed,
                sampling_seed=sampling_seed,
                inference=inference,
                timeout_s=settings["timeout_s"],
            )
            # The timer cancels this task at the deadline (wait_for would wrap the run in a second task
            # per episode). Finished episodes hand their timer on to the next, whose deadline only
            # moves it: no loop timer scheduled and cancelled per episode (see call_timeout).
            with call_timeout(settings["episode_timeout_s"]):
                rollouts = list(await run)
        except (ConfigError, MissingExtraError):
            raise
        except TimeoutError:
            error = LudicTimeoutError(
                f"episode {episode_index} did not finish within episode_timeout_s={settings['episode_timeout_s']}"
            )
            failure = EpisodeFailure.from_exception("timeout", error)
            rollouts = [Rollout(steps=[], failure=failure)]
        except Exception as exc:  # a crash of the env/protocol construction or of the protocol itself
            failure = EpisodeFailure.from_exception(stage, exc)
            rollouts = [Rollout(steps=[], failure=failure)]
        else:
            if not rollouts:
                failure = EpisodeFailure(
                    stage="protocol", error_type="ProtocolError", message="the protocol returned no rollouts"
                )
                rollouts = [Rollout(steps=[], failure=failure)]
            for rollout in rollouts:
                if rollout.failure is not None:
                    failure = rollout.failure
                    break
        return rollouts, failure

    @staticmethod
    def _stamp(
        rollout: Rollout, request: RolloutRequest, episode_index: int, engine_meta: dict[str, Any]
    ) -> None:
        """Add the request meta and the engine block to ``rollout.meta``; ``engine_meta`` becomes the
        rollout's own (pass each rollout a distinct dict)."""
        meta = rollout.meta
        request_meta = request.meta
        if request_meta:
            clashes = sorted(k for k in request_meta if k in meta)
            if clashes:
                # The protocol's keys describe what happened; the request's values stay under request_meta.
                log.warning("rollout_engine.meta_key_clash", keys=clashes, protocol=request.protocol.kind)
            for key, value in request_meta.items():
                meta.setdefault(key, value)
        meta["request_meta"] = dict(request_meta)
        meta["episode_index"] = episode_index
        meta["engine"] = engine_meta

    # -- SAW batches -------------------------------------------------------------------------------

    async def generate_batch(
        self,
        requests: Sequence[RolloutRequest],
        settings: RolloutSettings,
        *,
        credit_assigner: CreditAssigner,
        sample_filter: SampleFilter | None = None,
    ) -> SAWBatch:
        """Rollouts → credit → one SAW item per turn → filter.

        Failed episodes are left out, and so are the other members of their GRPO groups (a group with
        a missing member would get a biased baseline); both are counted in the batch meta.
        """
        result = await self.generate_rollouts(requests, settings)
        return rollouts_to_batch(
            result,
            credit_assigner=credit_assigner,
            sample_filter=sample_filter,
        )


def _copy_meta(engine_meta: dict[str, Any]) -> dict[str, Any]:
    return {**engine_meta, "return_spec": dict(engine_meta["return_spec"])}


def rollouts_to_batch(
    result: RolloutResult,
    *,
    credit_assigner: CreditAssigner,
    sample_filter: SampleFilter | None = None,
) -> SAWBatch:
    """The SAW batch of a :class:`RolloutResult` (see :meth:`RolloutEngine.generate_batch`)."""
    # A failed episode's rollouts all count as failed, even one whose own protocol view ended cleanly.
    failed_ids = {r.id for e in result.failed_episodes for r in e.rollouts}
    credited = credited_items(result.rollouts, credit_assigner, failed_ids=failed_ids)
    rollouts, items = credited.rollouts, credited.items
    kept, dropped = apply_filter(items, sample_filter)

    def avg(values: Sequence[float]) -> float | None:
        return sum(values) / len(values) if values else None

    episodes = result.episodes
    meta: dict[str, Any] = {
        "source": "rollouts",
        "num_episodes": len(episodes),
        "num_failed_episodes": len(result.failed_episodes),
        "failures": result.failure_summary(),
        "num_rollouts": len(rollouts),
        "num_rollouts_dropped_incomplete_groups": credited.num_dropped_incomplete_groups,
        "num_rollouts_unbuildable": len(credited.unbuildable),
        "unbuildable_rollouts": credited.unbuildable,
        "num_samples_before_filter": len(items),
        "num_samples": len(kept),
        "num_samples_filtered": dropped,
        "avg_total_reward": avg([r.total_reward for r in rollouts]),
        "avg_completion_length": avg([i.meta["completion_length"] for i in kept]),
        "avg_prompt_length": avg([i.meta["prompt_length"] for i in kept]),
        "episode_index_range": [episodes[0].episode_index, episodes[-1].episode_index] if episodes else None,
    }
    return SAWBatch(items=kept, meta=meta)
