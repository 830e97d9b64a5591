"""A scripted Tic-Tac-Toe teacher that knows the rules, not the game: it reads the last board drawn in
the rendered prompt and replies ``<move>B2</move>`` with a uniformly random free cell (seeded by the
request), as real tokenizer ids. Its games run through the same engine, agent and parser as the
model's, so SFT on them teaches the reply format and legal moves and leaves the play to RL.

Registered as the scripted teacher ``"tictactoe_rules"`` (entry-point group ``ludic.scripted_teachers``:
``ludic train tictactoe-selfplay`` warms up on its games).
"""

from __future__ import annotations

import random
import re
from typing import Any

from ludic_core.inference import TokenCompletionRequest
from ludic_core.testing import ScriptedChatClient
from ludic_envs.tictactoe.board import Board, coordinate_of

__all__ = ["board_in_prompt", "rules_teacher"]

_ROW = re.compile(r"^([123]) \| ([XO.]) ([XO.]) ([XO.])$", re.MULTILINE)


def board_in_prompt(prompt: str) -> Board:
    """The last board drawn in a rendered prompt (``Board.render``'s rows)."""
    rows = _ROW.findall(prompt)[-3:]
    if [r[0] for r in rows] != ["1", "2", "3"]:
        raise ValueError(f"no complete board in the prompt: {prompt[-200:]!r}")
    return Board(tuple(cell for row in rows for cell in row[1:]))


def rules_teacher(tokenizer: Any) -> ScriptedChatClient:
    """A scripted client replying with a random free cell of the prompt's last board in move tags."""

    def reply(request: TokenCompletionRequest, _call_index: int) -> str:
        board = board_in_prompt(tokenizer.decode(list(request.prompt_token_ids)))
        return f"<move>{coordinate_of(random.Random(request.seed).choice(board.legal_moves()))}</move>"

    return ScriptedChatClient(
        reply,
        encode=lambda text: tokenizer.encode(text, add_special_tokens=False),
        decode=lambda ids: tokenizer.decode(list(ids)),
    )
