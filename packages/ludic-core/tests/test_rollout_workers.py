"""Episodes in spawned worker processes (RolloutSettings.workers): same episodes whatever the number
of workers, errors with the worker's traceback, bounded waits, workers stopped on failure."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from core_worker_setups import engine, engine_in_context, seeded_protocol

from ludic_core import RolloutBatchSource, RolloutSettings, rollout_workers
from ludic_core.credit import MonteCarloReturn
from ludic_core.engine import EpisodeResult, RolloutEngine
from ludic_core.errors import ConfigError, LudicTimeoutError
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.rollout_log import read_rollouts
from ludic_core.rollout_workers import RolloutWorkerError, WorkerTraceback
from ludic_core.serialization import rollout_to_dict
from ludic_core.testing import GuessNumberEnv

SETTINGS = RolloutSettings(max_steps=6, concurrency=4)


def requests(count: int, env: str = "guess") -> list[RolloutRequest]:
    # Every third request brings its own seeds; the others take the engine's default seeds.
    return [
        RolloutRequest(
            EnvSpec(env, {"max_number": 9}),
            ProtocolSpec("seeded"),
            env_seed=1000 + i if i % 3 == 0 else None,
            sampling_seed=2000 + i if i % 3 == 0 else None,
            meta={"i": i},
        )
        for i in range(count)
    ]


def without_times(rollout: dict[str, Any]) -> dict[str, Any]:
    return {**rollout, "steps": [{k: v for k, v in s.items() if k != "ts_ns"} for s in rollout["steps"]]}


def as_dicts(episodes: tuple[EpisodeResult, ...]) -> list[object]:
    """Everything an episode is but the wall-clock time of its steps."""
    return [
        (
            e.episode_index,
            e.env_seed,
            e.sampling_seed,
            [without_times(rollout_to_dict(r)) for r in e.rollouts],
        )
        for e in episodes
    ]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has stopped; reaped is gone). Read from /proc where
    there is one: whichever thread reaped the worker, the kernel's view is the same."""
    stat = Path(f"/proc/{pid}/stat")
    if not Path("/proc/self/stat").exists():
        return pid in {p.pid for p in multiprocessing.active_children()}
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def stopped(pids: list[int | None], timeout_s: float = 60.0) -> bool:
    """Whether every worker has stopped within ``timeout_s`` (a SIGKILL on a loaded machine can take a
    moment to land)."""
    deadline = time.monotonic() + timeout_s
    while any(_running(pid) for pid in pids if pid is not None):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


async def test_workers_give_the_episodes_one_process_gives() -> None:
    one = engine()
    expected = [await one.generate_rollouts(requests(12), SETTINGS) for _ in range(2)]
    assert one._pool is None  # workers=1 starts no process

    many = engine()
    done: list[int] = []
    try:
        settings = attrs.evolve(SETTINGS, workers=2)
        # Two calls: the second reuses the workers and continues the default seeds.
        got = [
            await many.generate_rollouts(
                requests(12), settings, on_episode_done=lambda e: done.append(e.episode_index)
            )
            for _ in range(2)
        ]
        pids = many._pool.pids if many._pool else []
        assert len(set(pids)) == 2
    finally:
        many.close()
    assert stopped(pids)
    for left, right in zip(expected, got, strict=True):
        assert as_dicts(right.episodes) == as_dicts(left.episodes)
    assert sorted(done) == list(range(24))
    assert len({r.id for g in got for r in g.rollouts}) == 24


async def test_a_batch_source_over_workers_gives_the_batches_one_process_gives() -> None:
    def source(settings: RolloutSettings) -> RolloutBatchSource:
        return RolloutBatchSource(
            engine=engine(),
            credit_assigner=MonteCarloReturn(),
            requests=lambda step: requests(6),
            settings=settings,
        )

    one, many = source(SETTINGS), source(attrs.evolve(SETTINGS, workers=2))
    try:
        for _ in range(2):
            left, right = await one.next_batch(), await many.next_batch()
            assert [(i.input_ids, i.action_mask, i.weight) for i in right.items] == [
                (i.input_ids, i.action_mask, i.weight) for i in left.items
            ]
            assert right.items
    finally:
        many.engine.close()


async def test_the_caller_writes_the_rollout_log_and_keeps_its_requests(tmp_path: Path) -> None:
    many = RolloutEngine(
        worker_engine=functools.partial(engine_in_context, 7),
        base_seed=7,
        deterministic_ids=True,
        rollout_log=tmp_path / "log.jsonl",
    )
    batch = requests(5)
    try:
        result = await many.generate_rollouts(batch, attrs.evolve(SETTINGS, workers=2))
    finally:
        many.close()
    assert [e.request for e in result.episodes] == batch
    assert all(e.request is r for e, r in zip(result.episodes, batch, strict=True))
    logged = sorted(rollout_to_dict(r)["id"] for r in read_rollouts(tmp_path / "log.jsonl"))
    assert logged == sorted(r.id for r in result.rollouts)
    reference = await engine(7).generate_rollouts(batch, SETTINGS)
    assert as_dicts(result.episodes) == as_dicts(reference.episodes)


async def test_an_error_in_a_worker_is_raised_with_its_traceback_and_stops_the_workers() -> None:
    many = engine()
    with pytest.raises(ConfigError, match="max_number must be >= 1") as caught:
        await many.generate_rollouts(requests(4, env="bad_kwarg"), attrs.evolve(SETTINGS, workers=2))
    cause = caught.value.__cause__
    assert isinstance(cause, WorkerTraceback)
    assert "bad_kwarg_env" in str(cause) and "core_worker_setups.py" in str(cause)
    assert any("rollout worker" in note for note in caught.value.__notes__)
    assert many._pool is None


async def test_a_dead_worker_is_named_with_its_exit_code() -> None:
    many = engine()
    with pytest.raises(RolloutWorkerError, match=r"rollout worker \d \(pid \d+\) exited \(exit code 3\)"):
        await many.generate_rollouts(requests(2, env="exiting"), attrs.evolve(SETTINGS, workers=2))
    assert many._pool is None


async def test_a_worker_held_by_a_blocking_step_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # The held worker cannot close its engine: it is terminated once this grace has passed.
    monkeypatch.setattr(rollout_workers, "_STOP_TIMEOUT_S", 0.5)
    many = engine()
    settings = attrs.evolve(SETTINGS, workers=2, episode_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(LudicTimeoutError, match=r"did not return episode 0 within 1\.0 s"):
        await many.generate_rollouts(requests(1, env="blocking"), settings)
    # Worker start (seconds on a busy machine) plus the bound, never the 60 s step.
    assert time.monotonic() - started < 30


async def test_a_cancelled_call_stops_its_workers() -> None:
    many = engine()
    first_done = asyncio.Event()
    call = asyncio.ensure_future(
        many.generate_rollouts(
            requests(40, env="slow"),
            attrs.evolve(SETTINGS, workers=2),
            on_episode_done=lambda _: first_done.set(),
        )
    )
    await asyncio.wait_for(first_done.wait(), timeout=60)
    assert many._pool is not None
    pids = many._pool.pids
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert many._pool is None and stopped(pids)


def test_factories_that_cannot_travel_are_refused_by_name() -> None:
    closure = RolloutEngine(
        env_factories={"guess": GuessNumberEnv}, protocol_factories={"seeded": lambda: seeded_protocol()}
    )
    with pytest.raises(
        ConfigError, match=r"protocol_factories\['seeded'\].*cannot be pickled.*worker_engine"
    ):
        asyncio.run(closure.generate_rollouts(requests(1), attrs.evolve(SETTINGS, workers=2)))
    assert closure._pool is None


async def test_worker_engines_must_seed_as_the_caller_does() -> None:
    many = RolloutEngine(worker_engine=functools.partial(engine, 5), base_seed=0, deterministic_ids=True)
    with pytest.raises(ConfigError, match=r"base_seed=5.*the calling engine has base_seed=0"):
        await many.generate_rollouts(requests(1), attrs.evolve(SETTINGS, workers=2))
    assert many._pool is None


def test_workers_must_be_a_positive_int() -> None:
    with pytest.raises(ConfigError, match=r"RolloutSettings.workers must be an int >= 1, got 0"):
        RolloutSettings(max_steps=1, workers=0)


def test_a_backend_whose_client_lives_in_this_process_refuses_workers() -> None:
    from ludic_core.run.backends import ClientBackend
    from ludic_core.run.configs import EpisodesConfig
    from ludic_core.run.episodes import cli_worker_engine

    class InProcessBackend(ClientBackend):
        def __init__(self) -> None:
            self.client = None

    def config(workers: int) -> EpisodesConfig:
        return EpisodesConfig(env="guess", rollout=RolloutSettings(max_steps=1, workers=workers))

    assert cli_worker_engine(config(1), InProcessBackend()) is None
    with pytest.raises(ConfigError, match=r"rollout.workers=2 .* InProcessBackend cannot be rebuilt there"):
        cli_worker_engine(config(2), InProcessBackend())
