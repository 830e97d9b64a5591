"""DelegatingProtocol with a real model behind the sub-agent: a scripted parent delegates, a child on
LocalPolicyClient answers, and the child's rollout becomes trainable SAW items carrying the parent's
outcome as its reward."""

from __future__ import annotations

import asyncio
from typing import Any

import torch

from ludic_core.credit import EpisodicReturn
from ludic_core.env import SingleAgentEnv
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.parsing import ParseResult
from ludic_core.protocols import DelegatingProtocol
from ludic_core.saw_builder import build_saw_items
from ludic_core.testing import ScriptedAgent, ScriptedChatClient, render_text_dialog
from ludic_core.types import Info, Rollout, StepOutcome
from ludic_train.collate import collate_saw_items
from ludic_train.guards import check_items
from ludic_train.local_client import LocalPolicyClient
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

PARENT_REWARD = 0.75


class ReportEnv(SingleAgentEnv):
    """The parent reports what its helper said; any report earns PARENT_REWARD."""

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return "Ask your helper to say something, then report it.", {}

    def env_step(self, action: str) -> StepOutcome:
        return StepOutcome(obs="Thanks.", reward=PARENT_REWARD, terminated=True)


def parent_policy(request: TokenCompletionRequest, call_index: int) -> str:
    if call_index == 0:
        return 'CALL delegate {"task": "Say something."}'
    return "reported"


def accept_anything(text: str) -> ParseResult:
    return ParseResult(action=text)


def reference_logprobs(
    model: torch.nn.Module, prompt: tuple[int, ...], completion: tuple[int, ...]
) -> list[float]:
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return [logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(completion)]


def test_a_model_backed_child_yields_trainable_items_with_the_parent_outcome() -> None:
    tok = bpe_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    client = LocalPolicyClient(model, tok, seed=0)
    # A random tiny model almost never samples EOS: stopping on every token makes each child answer one
    # complete token (finish_reason "stop"), so it reaches the child's env as a parsed action.
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=1.0, max_tokens=64, stop_token_ids=range(len(tok))),
        return_=ReturnSpec.for_rl(),
    )

    def child() -> ScriptedAgent:
        return ScriptedAgent(
            client, parser=accept_anything, encode=lambda s: tok.encode(s, add_special_tokens=False)
        )

    parent = ScriptedAgent(ScriptedChatClient(parent_policy), external_tools=("delegate",))
    protocol = DelegatingProtocol(parent, child_agent_factory=child)

    async def run() -> list[Rollout]:
        try:
            return await protocol.run(
                env=ReportEnv(), max_steps=2, sampling_seed=3, inference=spec, timeout_s=60
            )
        finally:
            await client.aclose()

    root, helper = asyncio.run(run())
    assert root.failure is None and helper.failure is None
    assert helper.meta["parent_rollout_id"] == root.id and helper.meta["agent_id"] == "child@0"

    # The child's trace is the model's: its prompt is the child's own dialog, its logprobs a forward pass's.
    [call] = helper.agent_steps
    trace = call.trace
    assert trace.prompt_token_ids == tuple(
        tok.encode(render_text_dialog(call.prompt_messages), add_special_tokens=False)
    )
    assert call.prompt_messages[-1] == {"role": "user", "content": "Say something."}
    assert trace.finish_reason == "stop" and len(trace.completion_token_ids) == 1
    assert trace.completion_logprobs is not None and trace.sampling_temperature == 1.0
    expected = reference_logprobs(model, trace.prompt_token_ids, trace.completion_token_ids)
    assert all(abs(a - b) < 1e-4 for a, b in zip(trace.completion_logprobs, expected, strict=True))

    # Its answer reached the parent as the tool result.
    [delegated] = [s for s in root.agent_steps if s.action_target == "external"]
    assert delegated.tool_results is not None
    assert (
        delegated.tool_results[0].content
        == helper.env_steps[-1].parsed_action
        == tok.decode(trace.completion_token_ids)
    )

    # Credit: the child's own env has no reward; its reward step now carries the parent's return.
    assert root.total_reward == PARENT_REWARD and helper.total_reward == PARENT_REWARD
    assert helper.env_steps[-1].info["child_env_reward"] == 0.0

    rollouts = [root, helper]
    items = build_saw_items(rollouts, EpisodicReturn().compute(rollouts), require_actor_logps=True)
    child_items = [i for i in items if i.meta["delegation_role"] == "child"]
    [item] = child_items
    assert item.weight == PARENT_REWARD and item.meta["reward"] == PARENT_REWARD
    assert item.actor_logps == trace.completion_logprobs
    assert list(item.input_ids) == list(trace.prompt_token_ids + trace.completion_token_ids)
    kept, rejected = check_items(child_items, vocab_size=model.config.vocab_size)
    assert rejected == [] and kept == child_items
    batch: dict[str, Any] = collate_saw_items(child_items, pad_token_id=tok.pad_token_id)
    assert batch["weight"].tolist() == [PARENT_REWARD] and batch["action_mask"].sum().item() == 1
