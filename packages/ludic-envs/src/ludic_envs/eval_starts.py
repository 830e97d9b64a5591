"""Where each evaluated prompt starts, for the eval profiles of this package
(:data:`ludic_core.run.profiles.Starts`): under greedy sampling a prompt the model has seen before
is answered the same way, so ``n`` prompts measure ``n`` things only if each one starts somewhere else.

* Tic-Tac-Toe (:func:`tictactoe_starts`): the agent plays X and O in turn, each prompt from its own
  opening position: X from the empty board, then from the 72 positions after two moves; O from
  the 9 positions after X's first move, then from the 252 after three moves. Each depth's positions
  come in a seeded order, shallow ones first, so a short eval is mostly whole games. Past the 73 X or
  261 O positions they repeat, with other env seeds (other opponent dice). Self-play
  (:func:`selfplay_starts`): the same openings, X and O to move in turn.
* Datasets (:func:`row_starts`, GSM8K, MATH, any QA or code env): each prompt its own row, walked in a
  seeded permutation of the rows; rows repeat only when there are more prompts than rows.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping
from typing import Any

from ludic_core.errors import ConfigError
from ludic_core.seeding import derive_seed
from ludic_envs.tictactoe.board import Board

__all__ = ["opening_positions", "row_starts", "selfplay_starts", "tictactoe_starts"]


@functools.cache
def _positions_by_depth() -> tuple[tuple[str, ...], ...]:
    """The distinct undecided positions after 0, 1, 2 and 3 moves, each depth sorted."""
    depths: list[set[Board]] = [{Board()}]
    for _ in range(3):
        depths.append({board.play(i) for board in depths[-1] for i in board.legal_moves()})
    return tuple(tuple(sorted(board.compact() for board in depth)) for depth in depths)


def opening_positions(mark: str, seed: int) -> list[str]:
    """The opening positions with ``mark`` to move, shallow first, each depth in an order ``seed``
    fixes (X: the empty board then the 72 two-move positions; O: the 9 one-move then the 252
    three-move positions)."""
    if mark not in ("X", "O"):
        raise ConfigError(f"opening_positions: mark must be 'X' or 'O', got {mark!r}")
    rng = random.Random(derive_seed(seed, "openings", mark))
    positions: list[str] = []
    for depth in (0, 2) if mark == "X" else (1, 3):
        layer = list(_positions_by_depth()[depth])
        rng.shuffle(layer)
        positions.extend(layer)
    return positions


def tictactoe_starts(
    env_kwargs: Mapping[str, Any], _build_env: Callable[[], Any], seed: int, count: int
) -> list[dict[str, Any]]:
    """Prompt ``i``: the agent's side (X on even prompts, O on odd ones, unless ``agent_mark`` fixes
    it) and an opening position of that side (see the module docstring). A ``start_board`` in
    ``env_kwargs`` is kept for every prompt."""
    if env_kwargs.get("start_board") is not None:
        return [{} for _ in range(count)]
    fixed = env_kwargs.get("agent_mark")  # "X" or "O" fix the side; absent or "random": both
    openings = {mark: opening_positions(mark, seed) for mark in ("X", "O")}
    starts: list[dict[str, Any]] = []
    for i in range(count):
        mark = fixed if fixed in ("X", "O") else ("X", "O")[i % 2]
        slot = i if fixed in ("X", "O") else i // 2
        board = openings[mark][slot % len(openings[mark])]
        # The empty board is the env's own start: the agent moves first on it.
        starts.append({"agent_mark": mark, "start_board": None if board == "." * 9 else board})
    return starts


def selfplay_starts(
    env_kwargs: Mapping[str, Any], _build_env: Callable[[], Any], seed: int, count: int
) -> list[dict[str, Any]]:
    """Self-play prompt ``i``: an opening position with X to move on even prompts and O on odd ones
    (see the module docstring), both seats played by the policy. A ``start_board`` in ``env_kwargs``
    is kept for every prompt."""
    if env_kwargs.get("start_board") is not None:
        return [{} for _ in range(count)]
    openings = {mark: opening_positions(mark, seed) for mark in ("X", "O")}
    starts: list[dict[str, Any]] = []
    for i in range(count):
        positions = openings[("X", "O")[i % 2]]
        board = positions[(i // 2) % len(positions)]
        starts.append({"start_board": None if board == "." * 9 else board})
    return starts


def row_starts(
    env_kwargs: Mapping[str, Any], build_env: Callable[[], Any], seed: int, count: int
) -> list[dict[str, Any]]:
    """Prompt ``i``: row ``index`` of a seeded permutation of the env's rows (its ``num_samples``),
    unless ``env_kwargs`` fixes the row (``index`` or ``sample``) or the env has no rows to pick."""
    if env_kwargs.get("index") is not None or env_kwargs.get("sample") is not None:
        return [{} for _ in range(count)]
    rows = getattr(build_env(), "num_samples", None)
    if not rows:  # one fixed sample, or an env that does not pick rows by index
        return [{} for _ in range(count)]
    order = list(range(rows))
    random.Random(seed).shuffle(order)
    return [{"index": order[i % rows]} for i in range(count)]
