from __future__ import annotations

import pytest

from ludic_core.errors import ConfigError, DataError
from ludic_envs.tictactoe import COORDINATES, Board, coordinate_of, index_of, optimal_moves, position_value


def test_coordinates_are_column_letter_row_digit() -> None:
    assert COORDINATES[0] == "A1" and COORDINATES[2] == "C1" and COORDINATES[3] == "A2"
    assert [index_of(c) for c in COORDINATES] == list(range(9))
    assert index_of(" b2 ") == 4 and index_of("c3") == 8
    for bad in ("", "B", "D1", "A4", "2B", "B2 please", "B 2", "11"):
        assert index_of(bad) is None, bad
    with pytest.raises(DataError, match=r"0\.\.8"):
        coordinate_of(9)


@pytest.mark.parametrize(
    "layout",
    ["XXXOO....", "OO.XXX...", "X.O.X.O.X", "XO.XO.X..", ".OX.XOX..", "O.XOX.XO."],
)
def test_every_line_wins(layout: str) -> None:
    board = Board.from_string(layout)
    assert board.winner() == "X"
    assert board.over and board.legal_moves() == []


def test_turn_order_and_play() -> None:
    board = Board()
    assert board.to_move == "X"
    board = board.play(4)
    assert board.to_move == "O" and board.cells[4] == "X"
    with pytest.raises(DataError, match="not free"):
        board.play(4)
    assert board.render().splitlines()[2] == "2 | . X ."


def test_invalid_boards_are_rejected() -> None:
    with pytest.raises(DataError, match="9 cells"):
        Board.from_string("XO")
    with pytest.raises(DataError, match="X moves first"):
        Board.from_string("OO.......")
    with pytest.raises(DataError, match="cell B1"):
        Board(("X", "Z", ".", ".", ".", ".", ".", ".", "."))


def test_solver_values() -> None:
    assert position_value(Board()) == 0
    # X to move completes the top row.
    board = Board.from_string("XX.OO....")
    assert position_value(board) == 1
    assert optimal_moves(board) == (2,)
    # O to move must block C1; any other move lets X complete the top row.
    board = Board.from_string("XX..O....")
    assert board.to_move == "O"
    assert optimal_moves(board) == (2,)
    for move in board.legal_moves():
        if move != 2:
            assert position_value(board.play(move)) == 1
    # A draw-by-force position: the full board value is 0.
    assert position_value(Board.from_string("XOXXOOOXX")) == 0


def test_opponent_spec_errors() -> None:
    from ludic_envs.tictactoe import make_opponent

    with pytest.raises(ConfigError, match="'genius'"):
        make_opponent("genius")
    with pytest.raises(ConfigError, match="optimal_prob"):
        make_opponent("mixed", optimal_prob=1.5)
