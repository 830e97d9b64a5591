"""Eval profiles spread the prompts of `ludic eval` / `ludic rollouts` over distinct starts: N prompts
of a default Tic-Tac-Toe eval are N different games (position and seat), N GSM8K-style prompts walk N
distinct rows, and the same config always gives the same starts."""

from __future__ import annotations

from typing import Any

import pytest

from ludic_core.inference import InferenceSpec
from ludic_core.run.episodes import build_requests, prompt_starts
from ludic_core.run.profiles import resolve_profile
from ludic_envs.eval_profiles import qa_profile, tictactoe_profile
from ludic_envs.eval_starts import opening_positions, row_starts, tictactoe_starts
from ludic_envs.qa import DatasetQAEnv
from ludic_envs.tictactoe import Board, TicTacToeEnv


def _no_env() -> Any:
    raise AssertionError("the Tic-Tac-Toe starts need no env")


def _played(start: dict[str, Any], seed: int) -> tuple[str, str]:
    """The (board, side) the agent first sees when the env is built with ``start``."""
    env = TicTacToeEnv(**start)
    _obs, info = env.reset(seed=seed)[env.agent_id]
    return info["board"], info["mark"]


def test_opening_positions_are_every_distinct_opening_of_a_side_shallow_first() -> None:
    xs, os_ = opening_positions("X", 0), opening_positions("O", 0)
    assert (len(xs), len(set(xs)), len(os_), len(set(os_))) == (73, 73, 261, 261)
    assert xs[0] == "." * 9 and all(Board.from_string(b).move_count == 2 for b in xs[1:])
    assert all(Board.from_string(b).move_count == 1 for b in os_[:9])
    assert all(Board.from_string(b).to_move == "O" for b in os_)
    assert opening_positions("X", 0) == xs and opening_positions("X", 1) != xs  # the seed fixes the order


def test_n_tictactoe_prompts_are_n_different_games_on_both_seats() -> None:
    starts = tictactoe_starts({}, _no_env, seed=7, count=50)
    games = [_played(start, seed=i) for i, start in enumerate(starts)]
    assert len(set(games)) == 50  # distinct (position, seat) pairs: no two prompts alike
    assert [mark for _board, mark in games].count("X") == 25  # X and O in turn
    assert tictactoe_starts({}, _no_env, seed=7, count=50) == starts  # reproducible
    assert tictactoe_starts({}, _no_env, seed=8, count=50) != starts


def test_what_env_kwargs_fix_is_never_varied() -> None:
    as_o = tictactoe_starts({"agent_mark": "O"}, _no_env, seed=0, count=20)
    assert {s["agent_mark"] for s in as_o} == {"O"} and len({s["start_board"] for s in as_o}) == 20
    random_side = tictactoe_starts({"agent_mark": "random"}, _no_env, seed=0, count=4)
    assert [s["agent_mark"] for s in random_side] == ["X", "O", "X", "O"]
    assert tictactoe_starts({"start_board": "X...O...."}, _no_env, seed=0, count=3) == [{}, {}, {}]


def test_dataset_prompts_walk_distinct_rows_then_wrap() -> None:
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(5)]
    kwargs = {"samples": rows}
    starts = row_starts(kwargs, lambda: DatasetQAEnv(samples=rows), seed=3, count=7)
    indices = [s["index"] for s in starts]
    assert sorted(indices[:5]) == [0, 1, 2, 3, 4] and indices[5:] == indices[:2]
    assert row_starts(kwargs, lambda: DatasetQAEnv(samples=rows), seed=3, count=7) == starts
    assert row_starts({**kwargs, "index": 2}, _no_env, seed=3, count=2) == [{}, {}]
    assert row_starts({"sample": rows[0]}, _no_env, seed=3, count=2) == [{}, {}]


def test_requests_of_a_default_eval_differ_in_start_and_repeat_exactly() -> None:
    profile = resolve_profile("tictactoe")
    assert profile.starts is tictactoe_starts and tictactoe_profile().starts is tictactoe_starts

    def requests() -> list[Any]:
        starts = prompt_starts(profile, env="tictactoe", env_kwargs={}, seed=0, count=12)
        return build_requests(
            env="tictactoe", env_kwargs={}, episodes=12, samples_per_prompt=2, seed=0,
            inference=InferenceSpec(), starts=starts,
        )  # fmt: skip

    first = requests()
    per_prompt = {r.meta["group_id"]: (r.env_seed, tuple(sorted(r.env.kwargs.items()))) for r in first}
    assert len(per_prompt) == 12 and len({kwargs for _seed, kwargs in per_prompt.values()}) == 12
    # The samples of one prompt share its start (a GRPO group, pass@k).
    assert first[0].env.kwargs == first[1].env.kwargs and first[0].env_seed == first[1].env_seed
    assert [(r.env, r.env_seed, r.sampling_seed) for r in requests()] == [
        (r.env, r.env_seed, r.sampling_seed) for r in first
    ]


def test_qa_profile_rows_through_the_registered_env() -> None:
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(4)]
    starts = prompt_starts(qa_profile(), env="dataset_qa", env_kwargs={"samples": rows}, seed=0, count=4)
    assert sorted(s["index"] for s in starts) == [0, 1, 2, 3]


@pytest.mark.parametrize("count", [1, 146])
def test_every_start_builds_a_playable_env(count: int) -> None:
    for i, start in enumerate(tictactoe_starts({"opponent": "minimax"}, _no_env, seed=0, count=count)):
        board, mark = _played(start, seed=i)
        assert not Board.from_string(board).over and Board.from_string(board).to_move == mark
