"""Eval profiles of this package's envs for ``ludic eval`` and ``ludic rollouts``
(:class:`ludic_core.run.profiles.EvalProfile`, ``ludic.eval_profiles`` entry points by env name).

Tic-Tac-Toe: the reply is one cell (``B2`` or ``<move>B2</move>``); outcomes win / draw / loss, illegal,
parse_error, failed, unfinished; success is a win or a draw. Tic-Tac-Toe self-play: the same per seat,
plus opponent_illegal (the other seat's illegal move ended the game). Sum of products: the reply is
a bare number; outcomes correct / wrong / parse_error / failed. QA (any
:class:`~ludic_envs.qa.DatasetQAEnv`): the env grades the whole reply; outcomes correct / wrong /
no_answer / parse_error (empty reply) / failed; success is ``correct``. Code execution: the generic
outcomes. Prompts are spread over distinct starts (:mod:`ludic_envs.eval_starts`).
"""

from __future__ import annotations

import re

from ludic_core.evaluation import Record
from ludic_core.parsing import ParseResult
from ludic_core.run.profiles import EvalProfile
from ludic_envs.eval_starts import row_starts, selfplay_starts, tictactoe_starts

__all__ = [
    "cell_parser",
    "code_profile",
    "number_parser",
    "qa_profile",
    "selfplay_profile",
    "sum_of_products_profile",
    "tictactoe_profile",
]

_CELL = re.compile(r"\s*(?:<move>\s*)?([A-Ca-c][1-3])(?:\s*</move>)?\s*\.?\s*")


def cell_parser(text: str) -> ParseResult:
    """One cell, bare or in move tags (case, surrounding space and a final period ignored)."""
    match = _CELL.fullmatch(text)
    if match:
        return ParseResult(action=match.group(1).upper())
    return ParseResult(action=None, reward=-1.0, obs="Reply with one free cell, for example B2.")


def _tictactoe_outcome(record: Record) -> str:
    if record.get("failed"):
        return "failed"
    if record.get("parse_error"):  # the game stops at the first unparsable reply
        return "parse_error"
    if record.get("illegal_reason"):
        return "illegal"
    result = record.get("result")
    return result if result in ("win", "draw", "loss") else "unfinished"


def tictactoe_profile() -> EvalProfile:
    return EvalProfile(
        parser=cell_parser,
        outcomes=("win", "draw", "loss", "illegal", "parse_error", "failed", "unfinished"),
        outcome=_tictactoe_outcome,
        success=lambda record: _tictactoe_outcome(record) in ("win", "draw"),
        max_tokens=16,
        starts=tictactoe_starts,
        description="reply with one cell (B2 or <move>B2</move>)",
    )


def _selfplay_outcome(record: Record) -> str:
    if record.get("result") == "opponent_forfeit":
        return "opponent_illegal"
    return _tictactoe_outcome(record)


def selfplay_profile() -> EvalProfile:
    """One record per seat; a seat's success is a win or a draw, as against a bot."""
    return EvalProfile(
        parser=cell_parser,
        outcomes=(
            "win",
            "draw",
            "loss",
            "illegal",
            "opponent_illegal",
            "parse_error",
            "failed",
            "unfinished",
        ),
        outcome=_selfplay_outcome,
        success=lambda record: _selfplay_outcome(record) in ("win", "draw"),
        max_tokens=16,
        starts=selfplay_starts,
        description="each seat replies with one cell (B2 or <move>B2</move>)",
    )


_NUMBER = re.compile(r"\s*-?\d[\d,]*(\.\d+)?\s*")


def number_parser(text: str) -> ParseResult:
    """The reply must be a bare number (commas and surrounding space allowed); anything else is a parse
    failure with reward -1, which ends the episode."""
    if _NUMBER.fullmatch(text):
        return ParseResult(action=text.strip(), reward=0.0)
    return ParseResult(action=None, reward=-1.0, obs="Reply with the final number only.")


def _number_outcome(record: Record) -> str:
    if record.get("failed"):
        return "failed"
    if not record.get("reached_env"):
        return "parse_error"
    return "correct" if record.get("correct") else "wrong"


def sum_of_products_profile() -> EvalProfile:
    return EvalProfile(
        parser=number_parser,
        outcomes=("correct", "wrong", "parse_error", "failed"),
        outcome=_number_outcome,
        success=lambda record: _number_outcome(record) == "correct",
        max_tokens=64,
        description="reply with the number only (tool calls first, if the agent has tools)",
    )


def _qa_outcome(record: Record) -> str:
    if record.get("failed"):
        return "failed"
    if not record.get("reached_env"):
        return "parse_error"
    if record.get("correct"):
        return "correct"
    return "wrong" if record.get("answer_found") else "no_answer"


def qa_profile() -> EvalProfile:
    return EvalProfile(
        outcomes=("correct", "wrong", "no_answer", "parse_error", "failed"),
        outcome=_qa_outcome,
        success=lambda record: _qa_outcome(record) == "correct",
        max_tokens=1024,
        starts=row_starts,
        description="the env extracts and grades the answer",
    )


def code_profile() -> EvalProfile:
    return EvalProfile(
        max_tokens=1024, starts=row_starts, description="the env runs the reply's program against the tests"
    )
