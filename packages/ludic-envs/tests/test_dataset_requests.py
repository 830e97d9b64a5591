from __future__ import annotations

import json
from pathlib import Path

import pytest

from ludic_core.errors import ConfigError
from ludic_core.registry import make_env
from ludic_core.requests import ProtocolSpec
from ludic_envs.dataset_requests import DatasetRequestStream, indexed_env_requests
from ludic_envs.qa import load_rows

PROTOCOL = ProtocolSpec("single_agent")


def _indices(requests: list) -> list[int]:  # type: ignore[type-arg]
    return [r.env.kwargs["index"] for r in requests]


def _rows(n: int) -> list[dict[str, str]]:
    return [{"question": f"q{i}", "answer": str(i)} for i in range(n)]


def test_sequential_single_pass() -> None:
    stream = DatasetRequestStream(_rows(5), indexed_env_requests("dataset_qa", PROTOCOL))
    assert _indices(stream.next_requests(3)) == [0, 1, 2]
    assert _indices(stream.next_requests(3)) == [3, 4]
    assert stream.exhausted and stream.next_requests(3) == []


def test_shuffled_looping_is_seeded_and_reshuffles_each_pass() -> None:
    build = indexed_env_requests("dataset_qa", PROTOCOL)
    a = DatasetRequestStream(_rows(10), build, shuffle=True, seed=3, loop=True)
    b = DatasetRequestStream(_rows(10), build, shuffle=True, seed=3, loop=True)
    first, second = _indices(a.next_requests(10)), _indices(a.next_requests(10))
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != list(range(10)) and first != second
    assert _indices(b.next_requests(20)) == first + second
    c = DatasetRequestStream(_rows(10), build, shuffle=True, seed=4, loop=True)
    assert _indices(c.next_requests(10)) != first


def test_env_seeds_differ_per_pass() -> None:
    stream = DatasetRequestStream(_rows(2), indexed_env_requests("dataset_qa", PROTOCOL), loop=True)
    seeds = [r.env_seed for r in stream.next_requests(4)]
    assert len(set(seeds)) == 4


def test_grpo_groups_share_env_seed() -> None:
    stream = DatasetRequestStream(_rows(4), indexed_env_requests("dataset_qa", PROTOCOL), group_size=3)
    requests = stream.next_requests(2)
    assert len(requests) == 6
    groups: dict[str, list] = {}  # type: ignore[type-arg]
    for r in requests:
        groups.setdefault(r.meta["group_id"], []).append(r)
    assert len(groups) == 2
    for members in groups.values():
        assert len({m.env_seed for m in members}) == 1
        assert len({m.sampling_seed for m in members}) == 3
        assert len({m.env.kwargs["index"] for m in members}) == 1


def test_resume_from_state_dict() -> None:
    build = indexed_env_requests("dataset_qa", PROTOCOL)

    def stream() -> DatasetRequestStream:
        return DatasetRequestStream(_rows(7), build, shuffle=True, seed=1, loop=True, group_size=2)

    full = stream()
    full.next_requests(5)
    state = full.state_dict()
    expected = full.next_requests(9)
    resumed = stream()
    resumed.load_state_dict(state)
    assert resumed.next_requests(9) == expected
    other = DatasetRequestStream(_rows(7), build, shuffle=True, seed=2)
    with pytest.raises(ConfigError, match="seed"):
        other.load_state_dict(state)


def test_requests_build_real_envs(shared_data: Path) -> None:
    files = str(shared_data / "gsm8k" / "test.jsonl")
    rows = load_rows(split="test", data_files=files)
    build = indexed_env_requests("gsm8k", PROTOCOL, env_kwargs={"data_files": files, "split": "test"})
    stream = DatasetRequestStream(rows, build, shuffle=True, seed=0)
    for request in stream.next_requests(5):
        env = make_env(request.env.kind, **request.env.kwargs)
        obs, _ = env.reset(seed=request.env_seed)["agent_0"]
        assert obs == rows[request.meta["sample_index"]]["question"]
    with pytest.raises(ConfigError, match="index"):
        indexed_env_requests("gsm8k", PROTOCOL, env_kwargs={"index": 3})


class _DoubleStrategy:
    """A custom strategy without state: the stream checkpoints its own position only."""

    def expand(self, requests: list) -> list:  # type: ignore[type-arg]
        return [r for r in requests for _ in range(2)]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"shuffle": True, "seed": 5, "loop": True},
        {"shuffle": True, "seed": 5, "loop": True, "group_size": 3},
        {"loop": True, "group_size": 2},
        {"shuffle": True, "loop": True, "strategy": _DoubleStrategy()},
    ],
    ids=["sequential", "shuffled", "shuffled-grpo", "grpo", "custom-strategy"],
)
def test_state_dict_is_json_and_resumes_after_a_json_round_trip(options: dict[str, object]) -> None:
    build = indexed_env_requests("dataset_qa", PROTOCOL)

    def stream() -> DatasetRequestStream:
        return DatasetRequestStream(_rows(7), build, **options)  # type: ignore[arg-type]

    original = stream()
    original.next_requests(3)
    original.next_requests(2)
    state = original.state_dict()
    round_tripped = json.loads(json.dumps(state))
    assert round_tripped == state  # plain JSON types only: no tuples, no non-str keys
    resumed = stream()
    resumed.load_state_dict(round_tripped)
    for n in (2, 4):
        assert resumed.next_requests(n) == original.next_requests(n)
