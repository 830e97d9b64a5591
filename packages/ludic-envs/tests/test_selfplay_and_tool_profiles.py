"""The eval profiles of the self-play and tool-use envs (registered by env name): self-play labels
each seat's record, a forfeit by the other seat included, and spreads prompts over openings with X and
O to move in turn; the tool task's answer must be a bare number."""

from __future__ import annotations

from typing import Any

import pytest

from ludic_core.run.profiles import resolve_profile
from ludic_envs.eval_profiles import number_parser
from ludic_envs.eval_starts import selfplay_starts
from ludic_envs.tictactoe import Board, TicTacToeSelfPlayEnv


def test_the_answer_must_be_a_bare_number() -> None:
    assert number_parser(" 1,035 \n").action == "1,035"
    assert number_parser("-12.5").action == "-12.5"
    for reply in ["The answer is 1035", "<tool_call>{}</tool_call>", "", "1035."]:
        failed = number_parser(reply)
        assert failed.action is None and failed.reward == -1.0 and failed.obs


@pytest.mark.parametrize(
    ("record", "outcome"),
    [
        ({"correct": True, "reached_env": True}, "correct"),
        ({"correct": False, "reached_env": True}, "wrong"),
        ({"reached_env": False, "parse_error": True}, "parse_error"),
        ({"failed": True, "reached_env": True, "correct": True}, "failed"),
    ],
)
def test_sum_of_products_outcomes(record: dict[str, Any], outcome: str) -> None:
    profile = resolve_profile("sum_of_products")
    assert profile.parser is number_parser
    assert profile.label(record) == outcome
    assert profile.success is not None and profile.success(record) == (outcome == "correct")


@pytest.mark.parametrize(
    ("record", "outcome"),
    [
        ({"result": "win"}, "win"),
        ({"result": "draw"}, "draw"),
        ({"result": "loss"}, "loss"),
        ({"result": "illegal_move", "illegal_reason": "B2 is occupied"}, "illegal"),
        ({"result": "opponent_forfeit"}, "opponent_illegal"),
        ({"parse_error": True}, "parse_error"),
        ({"result": None}, "unfinished"),  # the other seat's unreadable reply ended the game
    ],
)
def test_selfplay_labels_each_seats_record(record: dict[str, Any], outcome: str) -> None:
    profile = resolve_profile("tictactoe_selfplay")
    assert profile.label(record) == outcome
    assert profile.success is not None and profile.success(record) == (outcome in ("win", "draw"))


def test_selfplay_prompts_start_from_distinct_openings_x_and_o_to_move_in_turn() -> None:
    starts = selfplay_starts({}, lambda: None, seed=0, count=20)
    assert starts == selfplay_starts({}, lambda: None, seed=0, count=20)
    assert len({s["start_board"] for s in starts}) == 20
    assert starts[0] == {"start_board": None}  # the empty board: X's first opening
    for i, start in enumerate(starts[1:], 1):
        board = Board.from_string(start["start_board"])
        assert board.to_move == ("X", "O")[i % 2] and not board.over
        TicTacToeSelfPlayEnv(start_board=start["start_board"]).reset(seed=0)  # a legal start
    assert selfplay_starts({"start_board": "X........"}, lambda: None, seed=0, count=2) == [{}, {}]
