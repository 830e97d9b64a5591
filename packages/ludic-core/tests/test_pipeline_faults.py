"""Exactly-once pipeline delivery under random SIGKILLs of actors, learners and Redis.

A real ``redis-server`` with an append-only file (``appendfsync always``), two actor processes (the
real :class:`RedisPipelineActor` loop; every item carries an ``item_id``) and two learner processes
sharing the queue (:class:`RedisBatchSource` with their own consumer names). The learners are
torch-free stand-ins for the trainer: "training" a batch appends its item ids to the model, which is
the checkpoint (written atomically every few steps, then ``checkpoint_committed``); a restarted
learner resumes its newest checkpoint, or now and then the oldest it keeps (discarding committed steps),
republishes its version and goes on. A seeded killer SIGKILLs a random process, or Redis, and
restarts it, at least 20 times. After the chaos the actors stop, the learners drain the queue, and
every item an actor pushed must be in exactly one learner's final model or in the dead-letter list
with a reason, and nothing else.

The file is also the actors' and learners' program: ``python test_pipeline_faults.py actor|learner ...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest

QUEUE = "faults:queue"
LEARNERS = ("learner-a", "learner-b")
ACTORS = ("actor-a", "actor-b")
SEED = int(os.environ.get("FAULT_SEED", "20240611"))
MIN_KILLS = 24
CHAOS_S = 40.0
CHECKPOINT_EVERY = 3
GROUP_SIZE = 2
# A learner that finds an item newer than its step stops with this code: the crash loop the
# dead-letter policy prevents (the real Trainer raises there).
FUTURE_ITEM_EXIT = 3
# Redis down or unreachable: an expected failure under the killer; the supervisor restarts the process.
REDIS_DOWN_EXIT = 75


def version_key(learner: str) -> str:
    return f"faults:version:{learner}"


# --- the actor process --------------------------------------------------------------------------------


async def run_actor(redis_url: str, name: str, incarnation: int, workdir: Path) -> None:
    import redis.asyncio as redis_asyncio

    from ludic_core import RolloutBatchSource, RolloutSettings
    from ludic_core.credit import GroupNormalizedReturn
    from ludic_core.engine import RolloutEngine
    from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
    from ludic_core.pipeline import BatchMessage, RedisPipelineActor
    from ludic_core.protocols.single_agent import SingleAgentProtocol
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.seeding import derive_seed
    from ludic_core.strategies import GRPORequestStrategy
    from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient

    inference = InferenceSpec(sampling=SamplingParams(max_tokens=4), return_=ReturnSpec.for_rl())
    chat = SeededChatClient(["1", "2", "3", "4"], seed=incarnation, policy_version=None)
    engine = RolloutEngine(
        env_factories={"guess": lambda: GuessNumberEnv(max_number=4, max_guesses=2)},
        protocol_factories={
            "scripted": lambda: SingleAgentProtocol(ScriptedAgent(chat, inference=inference))
        },
        base_seed=incarnation,
    )

    def requests(step: int) -> list[RolloutRequest]:
        base = RolloutRequest(env=EnvSpec("guess"), protocol=ProtocolSpec("scripted"), inference=inference)
        strategy = GRPORequestStrategy(group_size=GROUP_SIZE, seed=derive_seed(incarnation, "groups", step))
        return strategy.expand([base])

    redis = redis_asyncio.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)

    class PublishedVersion:
        """The oldest version the learners published: data is never newer than every learner."""

        async def get_policy_version(self) -> int:
            values = await redis.mget([version_key(name) for name in LEARNERS])
            return min(int(v or 0) for v in values)

    intent = (workdir / f"{name}.intent").open("a", encoding="utf-8")
    pushed = (workdir / f"{name}.pushed").open("a", encoding="utf-8")

    class IdentifyingActor(RedisPipelineActor):
        """Gives every item an id and logs it before (intent) and after (pushed) the push."""

        async def push(self, *messages: BatchMessage) -> None:
            named = [
                attrs.evolve(
                    m,
                    items=tuple(
                        attrs.evolve(item, meta={**item.meta, "item_id": f"{m.actor_id}/{m.batch_index}/{i}"})
                        for i, item in enumerate(m.items)
                    ),
                )
                for m in messages
            ]
            ids = [item.meta["item_id"] for m in named for item in m.items]
            intent.write("".join(f"{i}\n" for i in ids))
            intent.flush()
            await super().push(*named)
            pushed.write("".join(f"{i}\n" for i in ids))
            pushed.flush()

    async def pace(_step: int) -> None:
        await asyncio.sleep(0.05)

    source = RolloutBatchSource(
        engine=engine,
        requests=requests,
        credit_assigner=GroupNormalizedReturn(GROUP_SIZE),
        settings=RolloutSettings(max_steps=3),
    )
    actor = IdentifyingActor(
        source,
        redis_url=redis_url,
        queue_key=QUEUE,
        client=PublishedVersion(),  # type: ignore[arg-type]  # a version source, not a chat client
        max_queue_len=8,
        backpressure_timeout_s=60,
        version_deadline_s=2,
        before_batch=pace,
        actor_id=f"{name}.{incarnation}",
        connect_timeout_s=2,
        command_timeout_s=5,
    )
    stop = asyncio.Event()

    async def watch_stop_file() -> None:
        while not (workdir / "stop").exists():  # noqa: ASYNC110 (a file, not an event, says stop)
            await asyncio.sleep(0.1)
        stop.set()

    watcher = asyncio.create_task(watch_stop_file())
    try:
        await actor.run(stop_event=stop)
    finally:
        watcher.cancel()
        await redis.aclose()


# --- the learner process ------------------------------------------------------------------------------


def write_durably(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@attrs.frozen
class Checkpoints:
    """A learner's checkpoints, ``<name>.<step>.json``, and ``<name>.latest`` naming the current one
    (written last: a checkpoint is durable once the pointer names it). The last ``KEEP`` are kept."""

    workdir: Path
    name: str

    KEEP = 4

    def _path(self, step: int) -> Path:
        return self.workdir / f"{self.name}.{step:06d}.json"

    def _pointer(self) -> Path:
        return self.workdir / f"{self.name}.latest"

    def current_step(self) -> int | None:
        pointer = self._pointer()
        return int(pointer.read_text()) if pointer.exists() else None

    def kept(self) -> list[int]:
        current = self.current_step()
        steps = sorted(int(p.name.split(".")[1]) for p in self.workdir.glob(f"{self.name}.*.json"))
        return [s for s in steps if current is not None and s <= current]

    def load(self) -> dict[str, Any]:
        current = self.current_step()
        if current is None:
            return {"step": 0, "trained": [], "source": None}
        return dict(json.loads(self._path(current).read_text()))

    def save(self, state: dict[str, Any]) -> None:
        write_durably(self._path(state["step"]), state)
        write_durably(self._pointer(), state["step"])
        for step in self.kept()[: -self.KEEP]:
            self._path(step).unlink()

    def rewind(self) -> None:
        """Make the oldest kept checkpoint the current one: the steps after it are discarded."""
        kept = self.kept()
        if len(kept) > 1:
            write_durably(self._pointer(), kept[0])


async def run_learner(redis_url: str, name: str, older: bool, workdir: Path) -> None:
    import redis.asyncio as redis_asyncio

    from ludic_core.errors import LudicTimeoutError
    from ludic_core.pipeline import RedisBatchSource

    checkpoints = Checkpoints(workdir, name)
    if older:
        checkpoints.rewind()
    state = checkpoints.load()
    step: int = state["step"]
    trained: list[list[Any]] = state["trained"]  # the "model": [step, item ids] per training step
    source = RedisBatchSource(
        redis_url,
        queue_key=QUEUE,
        consumer=name,
        min_items=4,
        poll_timeout_s=0.2,
        wait_timeout_s=1.0,
        current_version=lambda: step,
        keep_trained_messages=100_000,
        connect_timeout_s=2,
    )
    if state["source"] is not None:
        source.load_state_dict(state["source"])
    redis = redis_asyncio.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    await redis.set(version_key(name), step)  # republish before training

    def checkpoint() -> None:
        checkpoints.save({"step": step, "trained": trained, "source": source.state_dict()})
        source.checkpoint_committed(step)

    try:
        while True:
            try:
                batch = await source.next_batch()
            except LudicTimeoutError:
                if not (workdir / "actors-done").exists():
                    continue
                if source.min_items > 1:
                    source.min_items = 1  # the drain: serve what is left, however little
                    continue
                checkpoint()
                return
            future = [i.meta["policy_version"] for i in batch.items if i.meta["policy_version"] > step]
            if future:
                print(f"{name} at step {step} was served items of versions {future}", file=sys.stderr)
                raise SystemExit(FUTURE_ITEM_EXIT)
            step += 1
            trained.append([step, [item.meta["item_id"] for item in batch.items]])
            await redis.set(version_key(name), step)
            if step % CHECKPOINT_EVERY == 0:
                checkpoint()
    finally:
        await source.aclose()
        await redis.aclose()


def role_main(argv: list[str]) -> int:
    from redis.exceptions import RedisError

    from ludic_core.errors import LudicTimeoutError, TransportError

    role, redis_url, name, workdir = argv[0], argv[1], argv[2], Path(argv[4])
    try:
        if role == "actor":
            asyncio.run(run_actor(redis_url, name, int(argv[3]), workdir))
        else:
            asyncio.run(run_learner(redis_url, name, argv[3] == "older", workdir))
    except (TransportError, LudicTimeoutError, RedisError) as exc:
        print(f"{name}: Redis unavailable: {exc}", file=sys.stderr)
        return REDIS_DOWN_EXIT
    return 0


# --- the supervisor (the test) ------------------------------------------------------------------------


@attrs.define
class Supervised:
    name: str
    role: str
    process: subprocess.Popen[bytes] | None = None
    incarnation: int = 0


@attrs.define
class Chaos:
    redis_url: str
    workdir: Path
    rng: random.Random
    kills: Counter[str] = attrs.field(factory=Counter)
    exits: Counter[int] = attrs.field(factory=Counter)
    older_resumes: int = 0
    failures: list[str] = attrs.field(factory=list)

    def start(self, member: Supervised) -> None:
        member.incarnation += 1
        if member.role == "actor":
            extra = str(member.incarnation)
        else:
            older = member.incarnation > 1 and self.rng.random() < 0.25
            self.older_resumes += older
            extra = "older" if older else "newest"
        log = (self.workdir / f"{member.name}.log").open("ab")
        member.process = subprocess.Popen(
            [sys.executable, __file__, member.role, self.redis_url, member.name, extra, str(self.workdir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        log.close()

    def reap(self, member: Supervised, *, restart: bool) -> None:
        """Record how an exited process ended; a bug (any exit but 0 or Redis down) fails the test."""
        assert member.process is not None
        code = member.process.poll()
        if code is None:
            return
        self.exits[code] += 1
        if code not in (0, REDIS_DOWN_EXIT, -signal.SIGKILL):
            tail = (self.workdir / f"{member.name}.log").read_text(errors="replace")[-3000:]
            self.failures.append(f"{member.name} exited with {code}:\n{tail}")
        if restart and code != 0:
            self.start(member)


def read_ids(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.redis
@pytest.mark.slow  # ~60 s: 40 s of chaos, then the drain
def test_every_item_is_trained_or_dead_lettered_exactly_once_under_random_kills(tmp_path: Path) -> None:
    import redis

    from ludic_core.pipeline import decode_message
    from ludic_core.pipeline.local_server import RedisServerNotFound, free_loopback_port, start_redis_server

    port = free_loopback_port()
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    try:
        server = start_redis_server(redis_dir, port=port, durable=True)
    except RedisServerNotFound as exc:
        pytest.skip(str(exc))
    chaos = Chaos(redis_url=f"redis://127.0.0.1:{port}/0", workdir=tmp_path, rng=random.Random(SEED))
    members = [Supervised(n, "actor") for n in ACTORS] + [Supervised(n, "learner") for n in LEARNERS]
    try:
        for member in members:
            chaos.start(member)
        started = time.monotonic()
        while time.monotonic() - started < CHAOS_S or sum(chaos.kills.values()) < MIN_KILLS:
            time.sleep(chaos.rng.uniform(0.6, 1.4))
            for member in members:
                chaos.reap(member, restart=True)
            if chaos.rng.random() < 0.2:
                server.send_signal(signal.SIGKILL)
                server.wait(timeout=10)
                chaos.kills["redis"] += 1
                time.sleep(chaos.rng.uniform(0.0, 0.5))
                server = start_redis_server(redis_dir, port=port, durable=True)
                continue
            victim = chaos.rng.choice(members)
            assert victim.process is not None
            if victim.process.poll() is None:
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait(timeout=10)
                chaos.kills[victim.role] += 1
            chaos.reap(victim, restart=True)

        # The end: actors stop after their batch in flight, then the learners drain and checkpoint.
        (tmp_path / "stop").touch()
        deadline = time.monotonic() + 30
        for member in members:
            while member.role == "actor" and member.process is not None and time.monotonic() < deadline:
                if member.process.poll() is None:
                    time.sleep(0.1)
                    continue
                chaos.reap(member, restart=True)  # one that died on its way out runs again, then stops
                if member.process.poll() == 0:
                    break
        (tmp_path / "actors-done").touch()
        for member in members:
            while (
                member.role == "learner" and member.process is not None and time.monotonic() < deadline + 30
            ):
                if member.process.poll() is None:
                    time.sleep(0.1)
                    continue
                chaos.reap(member, restart=True)
                if member.process.poll() == 0:
                    break
        assert all(m.process is not None and m.process.poll() == 0 for m in members), "did not finish"
    finally:
        for member in members:
            if member.process is not None and member.process.poll() is None:
                member.process.kill()
                member.process.wait(timeout=10)
        client = redis.Redis(port=port, socket_timeout=5)
        try:
            queue_left = client.llen(QUEUE)
            claims_left = {n: client.llen(f"{QUEUE}:processing:{n}") for n in LEARNERS}
            dead = [decode_message(raw) for raw in client.lrange(f"{QUEUE}:dead", 0, -1)]
        finally:
            client.close()
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)

    assert not chaos.failures, "\n\n".join(chaos.failures)
    intended = {i for name in ACTORS for i in read_ids(tmp_path / f"{name}.intent")}
    pushed = {i for name in ACTORS for i in read_ids(tmp_path / f"{name}.pushed")}
    trained = [
        item_id
        for name in LEARNERS
        for _step, ids in Checkpoints(tmp_path, name).load()["trained"]
        for item_id in ids
    ]
    dead_letters = [
        (item.meta["item_id"], m.meta.get("dead_letter_reason")) for m in dead for item in m.items
    ]
    dead_ids = [item_id for item_id, _ in dead_letters]
    total_kills = sum(chaos.kills.values())
    print(
        f"\nfault injection (seed {SEED}): {total_kills} kills {dict(chaos.kills)}, "
        f"{chaos.older_resumes} resumes of an older checkpoint, exits {dict(chaos.exits)}; "
        f"items pushed {len(pushed)} (+{len(intended - pushed)} whose push was cut short), "
        f"trained {len(trained)}, dead-lettered {len(dead_ids)}"
    )
    assert total_kills >= MIN_KILLS and all(chaos.kills[k] > 0 for k in ("actor", "learner", "redis"))
    assert queue_left == 0 and claims_left == dict.fromkeys(LEARNERS, 0)
    duplicates = [i for i, n in Counter(trained + dead_ids).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} items delivered twice, e.g. {duplicates[:5]}"
    assert all(reason for _, reason in dead_letters), "a dead letter without a reason"
    missing = pushed - set(trained) - set(dead_ids)
    assert not missing, (
        f"{len(missing)} pushed items were neither trained nor dead-lettered, e.g. {sorted(missing)[:5]}"
    )
    unknown = set(trained + dead_ids) - intended
    assert not unknown, f"{len(unknown)} items no actor produced, e.g. {sorted(unknown)[:5]}"
    # The run did real work between the kills: about 400 items on a quiet machine, 57 seen on a loaded one.
    assert len(pushed) > 20


if __name__ == "__main__":
    sys.exit(role_main(sys.argv[1:]))
