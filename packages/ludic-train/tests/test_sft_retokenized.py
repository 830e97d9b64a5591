"""Message-level rollouts (from an OpenAI-compatible or hosted API: no token ids) become SFT data once
re-tokenised with the student's chat template, and the student learns from them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ludic_core import EnvSpec, ProtocolSpec, RolloutEngine, RolloutRequest, RolloutSettings
from ludic_core.algorithms import sft
from ludic_core.errors import DataError
from ludic_core.inference import SamplingParams, TokenCompletionRequest
from ludic_core.message_agent import MessageAgent
from ludic_core.message_client import MessageCompletion
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.retokenize import TokenizerTemplate
from ludic_core.testing import GuessNumberEnv
from ludic_core.testing.scripted_agent import identity_parser
from ludic_core.types import Message
from ludic_train.config import TrainerConfig
from ludic_train.local_client import LocalPolicyClient
from ludic_train.sft import load_sft_items, sft_batch_source
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

TEACHER_REPLY = "answer: 7"


class ConstantTeacher:
    """Stands in for a hosted model behind an OpenAI-compatible API (none can run here): a
    :class:`~ludic_core.message_client.MessageClient` that always gives the same reply."""

    async def complete_messages(
        self, messages: Sequence[Message], sampling: SamplingParams, *, seed: int | None = None
    ) -> MessageCompletion:
        return MessageCompletion(text=TEACHER_REPLY, finish_reason="stop", model="teacher")


async def teacher_rollouts(path: Path, episodes: int) -> None:
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={
            "teacher": lambda: SingleAgentProtocol(MessageAgent(ConstantTeacher(), parser=identity_parser))
        },
        rollout_log=path,
    )
    requests = [
        RolloutRequest(EnvSpec("guess"), ProtocolSpec("teacher"), env_seed=i) for i in range(episodes)
    ]
    await engine.generate_rollouts(requests, RolloutSettings(max_steps=1, on_failure="raise"))


async def exact_match_rate(client: LocalPolicyClient, template: TokenizerTemplate, seeds: range) -> float:
    hits = 0
    for seed in seeds:
        obs, _ = GuessNumberEnv().env_reset(seed=seed)
        prompt = template.encode(template.render_text([{"role": "user", "content": obs}]))
        response = await client.complete_tokens(
            TokenCompletionRequest(prompt, SamplingParams(temperature=0.0, max_tokens=12))
        )
        hits += template.tokenizer.decode(list(response.completion_token_ids)).startswith(TEACHER_REPLY)
    return hits / len(seeds)


async def test_sft_on_retokenized_message_rollouts_teaches_the_student(tmp_path: Path) -> None:
    path = tmp_path / "teacher.jsonl"
    await teacher_rollouts(path, episodes=16)
    with pytest.raises(DataError, match=r"message-level .* re-tokenise"):
        load_sft_items(path)

    tokenizer = bpe_tokenizer()
    template = TokenizerTemplate(tokenizer)
    items = load_sft_items(path, chat_template=template)
    assert len(items) == 16 and all(i.meta["retokenized"] and i.actor_logps is None for i in items)
    reply_ids = [t for t, a in zip(items[0].input_ids, items[0].action_mask, strict=True) if a]
    assert tokenizer.decode(reply_ids).startswith(TEACHER_REPLY + "<|im_end|>")

    model = tiny_causal_lm(tokenizer, seed=0)
    client = LocalPolicyClient(model, tokenizer)
    held_out = range(100, 108)
    before = await exact_match_rate(client, template, held_out)
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=sft_batch_source(path, batch_size=8, seed=0, chat_template=template),
        config=TrainerConfig(pad_token_id=0, device="cpu", lr=3e-3, publish_every_steps=0, max_seq_len=256),
    )
    await trainer.train(30)
    after = await exact_match_rate(client, template, held_out)
    # The untrained student never says it; after 30 SFT steps it does on held-out prompts.
    assert before == 0.0 and after >= 0.875, (before, after)
