"""Tic-Tac-Toe rules: an immutable board, moves by coordinate, winners.

Coordinates follow the spreadsheet convention: the letter is the column (``A`` left to ``C`` right) and
the digit the row (``1`` top to ``3`` bottom), so ``A1`` is the top-left cell and ``C3`` the bottom-right.
The rendered board prints both axes, so a model never has to guess the convention.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

import attrs

from ludic_core.errors import ConfigError, DataError

__all__ = [
    "COORDINATES",
    "EMPTY",
    "Board",
    "Mark",
    "check_start_board",
    "coordinate_of",
    "index_of",
    "other_mark",
]

Mark: TypeAlias = Literal["X", "O"]
EMPTY = "."
COLUMNS = "ABC"
ROWS = "123"
COORDINATES: tuple[str, ...] = tuple(f"{col}{row}" for row in ROWS for col in COLUMNS)
"""Every coordinate in cell-index order: ``A1 B1 C1 A2 … C3``."""

_LINES: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),
    (0, 3, 6),
    (1, 4, 7),
    (2, 5, 8),
    (0, 4, 8),
    (2, 4, 6),
)


def other_mark(mark: Mark) -> Mark:
    return "O" if mark == "X" else "X"


def check_mark(value: object, field: str = "mark") -> Mark:
    if value == "X":
        return "X"
    if value == "O":
        return "O"
    raise ConfigError(f"{field} must be 'X' or 'O', got {value!r}")


def index_of(coordinate: object) -> int | None:
    """The cell index (0–8) of a coordinate such as ``"b2"`` (case and surrounding space ignored).

    Returns None when the value is not exactly one coordinate (a non-string included: an env step
    hands it whatever a caller passed); tolerant extraction from free text is the agent parser's job,
    not the env's.
    """
    if not isinstance(coordinate, str):
        return None
    text = coordinate.strip().upper()
    if len(text) != 2 or text[0] not in COLUMNS or text[1] not in ROWS:
        return None
    return ROWS.index(text[1]) * 3 + COLUMNS.index(text[0])


def action_text(action: object) -> str:
    """How an action is shown back in an illegal-move observation: the text itself, stripped, or the
    ``repr`` of a non-string so that ``None`` and ``5`` read as what they were."""
    return action.strip() if isinstance(action, str) else repr(action)


def coordinate_of(index: int) -> str:
    if not 0 <= index < 9:
        raise DataError(f"cell index must be in 0..8, got {index!r}")
    return COORDINATES[index]


def _cells(values: Iterable[str]) -> tuple[str, ...]:
    cells = tuple(values)
    if len(cells) != 9:
        raise DataError(f"a board has 9 cells, got {len(cells)}: {cells!r}")
    for i, cell in enumerate(cells):
        if cell not in ("X", "O", EMPTY):
            raise DataError(f"board cell {coordinate_of(i)} must be 'X', 'O' or {EMPTY!r}, got {cell!r}")
    return cells


@attrs.frozen
class Board:
    """An immutable 3×3 board. X always moves first, so whose turn it is follows from the marks."""

    cells: tuple[str, ...] = attrs.field(default=(EMPTY,) * 9, converter=_cells)

    @classmethod
    def from_string(cls, text: str) -> Board:
        """Build from 9 characters in cell order (``X``, ``O``, ``.``), whitespace and ``|`` ignored."""
        return cls(tuple(c for c in text if c not in " \n\t|"))

    def __attrs_post_init__(self) -> None:
        xs, os_ = self.cells.count("X"), self.cells.count("O")
        if xs - os_ not in (0, 1):
            raise DataError(
                f"X moves first, so X count minus O count must be 0 or 1; board {self.compact()!r}"
            )

    def compact(self) -> str:
        return "".join(self.cells)

    @property
    def to_move(self) -> Mark:
        return "X" if self.cells.count("X") == self.cells.count("O") else "O"

    @property
    def move_count(self) -> int:
        return 9 - self.cells.count(EMPTY)

    def legal_moves(self) -> list[int]:
        if self.winner() is not None:
            return []
        return [i for i, c in enumerate(self.cells) if c == EMPTY]

    def play(self, index: int) -> Board:
        """The board after the player to move marks ``index``."""
        if self.winner() is not None:
            raise DataError(f"the game on board {self.compact()!r} is already won")
        if not 0 <= index < 9 or self.cells[index] != EMPTY:
            raise DataError(f"cell {index!r} is not free on board {self.compact()!r}")
        cells = list(self.cells)
        cells[index] = self.to_move
        return Board(tuple(cells))

    def winner(self) -> Mark | None:
        for a, b, c in _LINES:
            mark = self.cells[a]
            if mark != EMPTY and mark == self.cells[b] == self.cells[c]:
                return check_mark(mark)
        return None

    @property
    def full(self) -> bool:
        return EMPTY not in self.cells

    @property
    def over(self) -> bool:
        return self.winner() is not None or self.full

    def render(self) -> str:
        """A small grid with both axes labelled, e.g. ``1 | X . O``."""
        lines = ["    A B C"]
        for r, row in enumerate(ROWS):
            lines.append(f"{row} | " + " ".join(self.cells[r * 3 : r * 3 + 3]))
        return "\n".join(lines)


def check_start_board(start_board: object, name: str = "start_board") -> Board | None:
    """An env's ``start_board`` option: ``None``, or nine cells (``"X.O......"``) of a legal, undecided
    position. Refuses anything else with a ``ConfigError`` naming ``name`` and the value."""
    if start_board is None:
        return None
    if not isinstance(start_board, str):
        raise ConfigError(f"{name} must be a string of 9 cells, got {start_board!r}")
    try:
        board = Board.from_string(start_board)
    except DataError as exc:
        raise ConfigError(f"{name}={start_board!r} is not a valid position: {exc}") from None
    if board.over:
        raise ConfigError(f"{name}={start_board!r} is already decided; the agent would have no move")
    return board
