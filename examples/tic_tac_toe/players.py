"""Scripted players that answer in the agent's exact format, for teacher games and yardsticks.

They are ordinary :class:`~ludic_core.inference.ChatClient` s: they read the board from the rendered
prompt (decoded from the prompt token ids), pick a cell and reply ``<move>B2</move>`` as real tokenizer
ids. So teacher games run through the same engine, agent, parser and SAW builder as the model's games,
and a yardstick is scored by the very evaluation that scores the model.
"""

from __future__ import annotations

import random
from typing import Any

from common import MAX_MOVES, grpo_requests, legal_moves_in_prompt, make_engine, rollout_settings

from ludic_agents.chat_template import ChatTemplate
from ludic_core.credit import ConstantCredit
from ludic_core.inference import TokenCompletionRequest
from ludic_core.saw import SAWItem
from ludic_core.saw_builder import build_saw_items
from ludic_core.testing import ScriptedChatClient
from ludic_envs.tictactoe import coordinate_of, optimal_moves
from ludic_envs.tictactoe.teachers import board_in_prompt


def _client(tokenizer: Any, choose: Any) -> ScriptedChatClient:
    def reply(request: TokenCompletionRequest, _call_index: int) -> str:
        prompt = tokenizer.decode(list(request.prompt_token_ids))
        return f"<move>{choose(prompt, random.Random(request.seed))}</move>"

    return ScriptedChatClient(
        reply,
        encode=lambda text: tokenizer.encode(text, add_special_tokens=False),
        decode=lambda ids: tokenizer.decode(list(ids)),
    )


def random_legal_player(tokenizer: Any) -> ScriptedChatClient:
    """Plays a uniformly random free cell (seeded by the request): knows the rules, not the game."""
    return _client(tokenizer, lambda prompt, rng: rng.choice(legal_moves_in_prompt(prompt)))


def perfect_player(tokenizer: Any) -> ScriptedChatClient:
    """Plays a random move among those the minimax solver rates best: the ceiling."""
    return _client(
        tokenizer, lambda prompt, rng: coordinate_of(rng.choice(optimal_moves(board_in_prompt(prompt))))
    )


async def teacher_moves(
    tokenizer: Any, chat_template: ChatTemplate, *, games: int, seed: int
) -> tuple[int, list[SAWItem]]:
    """The warm start's data: ``games`` games of :func:`random_legal_player` against the random
    opponent, through the agent's engine, as one SAW item per move (weight 1). Returns the number of
    games played and the items."""
    engine = make_engine(random_legal_player(tokenizer), chat_template=chat_template, seed=seed)
    requests = grpo_requests(group_size=1, groups_per_step=games, temperature=1.0, seed=seed)(0)
    played = await engine.generate_rollouts(requests, rollout_settings(MAX_MOVES))
    rollouts = list(played.rollouts)
    return len(rollouts), build_saw_items(rollouts, ConstantCredit().compute(rollouts))
