"""The scripted teachers that warm a model up before RL: the calculator teacher knows the Hermes call
format, not the task (three habits, a copied tool result), and the Tic-Tac-Toe teacher knows the
rules, not the game (a legal cell of the board in the prompt, in move tags)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from ludic_core.inference import SamplingParams, TokenCompletionRequest
from ludic_core.testing import ByteTokenizer
from ludic_envs.delegation.calculator_teacher import calculator_teacher, teacher_reply
from ludic_envs.tictactoe import Board, TicTacToeEnv, coordinate_of
from ludic_envs.tictactoe.teachers import board_in_prompt, rules_teacher

QUESTION = "<|im_start|>user\nCompute 12 × 34 + 567 × 89. Reply with the number only.<|im_end|>\n"
ASSISTANT = "<|im_start|>assistant\n"


class Tokenizer:
    """The two methods the teachers use, over bytes."""

    def __init__(self) -> None:
        self.bytes = ByteTokenizer()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.bytes.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.bytes.decode(ids)


def _reply(client: object, prompt: str, seed: int) -> str:
    request = TokenCompletionRequest(
        prompt_token_ids=tuple(Tokenizer().encode(prompt)), sampling=SamplingParams(max_tokens=256), seed=seed
    )
    return asyncio.run(client.complete_tokens(request)).text  # type: ignore[attr-defined]


def test_the_calculator_teacher_has_three_habits_drawn_from_the_seed() -> None:
    replies = {teacher_reply(QUESTION + ASSISTANT, random.Random(seed)) for seed in range(30)}
    direct = f"{10 * 30 + 600 * 90}<|im_end|>"  # each factor rounded to its leading digit
    first = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call><|im_end|>'
    whole = first.replace('"12 * 34"', '"12 * 34 + 567 * 89"')
    assert replies == {direct, first, whole}
    assert teacher_reply(QUESTION + ASSISTANT, random.Random(7)) == teacher_reply(
        QUESTION + ASSISTANT, random.Random(7)
    )


def test_the_calculator_teacher_copies_the_tool_result_and_needs_a_question() -> None:
    after_tool = (
        QUESTION + ASSISTANT + "<tool_call>{}</tool_call><|im_end|>\n<|im_start|>tool\n 408 <|im_end|>\n"
    )
    assert teacher_reply(after_tool + ASSISTANT, random.Random(0)) == "408<|im_end|>"
    with pytest.raises(ValueError, match="no two-product question in the prompt"):
        teacher_reply("<|im_start|>user\nCompute 2 × 3.<|im_end|>\n" + ASSISTANT, random.Random(0))


def test_the_calculator_teacher_replies_in_the_students_token_ids() -> None:
    client = calculator_teacher(Tokenizer())
    text = _reply(client, QUESTION + ASSISTANT, seed=5)
    assert text == teacher_reply(QUESTION + ASSISTANT, random.Random(5))


def test_the_tictactoe_teacher_plays_a_random_legal_cell_of_the_last_board() -> None:
    env = TicTacToeEnv(start_board="XO.X.O...", agent_mark="X", opponent="random")
    obs, _info = env.reset(seed=0)[env.agent_id]
    prompt = f"<|im_start|>user\n{Board().render()}<|im_end|>\n<|im_start|>user\n{obs}<|im_end|>\n{ASSISTANT}"
    assert board_in_prompt(prompt) == Board.from_string("XO.X.O...")
    legal = {coordinate_of(i) for i in Board.from_string("XO.X.O...").legal_moves()}
    moves = {_reply(rules_teacher(Tokenizer()), prompt, seed=seed) for seed in range(40)}
    assert moves == {f"<move>{cell}</move>" for cell in legal}
    with pytest.raises(ValueError, match="no complete board in the prompt"):
        board_in_prompt("no board here")
