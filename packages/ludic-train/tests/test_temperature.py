"""Training sees the distribution the sampler drew from: on-policy importance ratios are 1 at any
sampling temperature, end to end (LocalPolicyClient → protocol → SAW builder → collation → GRPO loss)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from ludic_core import RolloutSettings
from ludic_core.credit import ConstantCredit
from ludic_core.engine import RolloutEngine
from ludic_core.env import SingleAgentEnv
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.parsing import ParseResult
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWItem
from ludic_core.saw_builder import build_saw_items
from ludic_core.testing import ScriptedAgent
from ludic_core.types import Info, StepOutcome
from ludic_train.collate import collate_saw_items
from ludic_train.local_client import LocalPolicyClient
from ludic_train.losses import TokenClippedSurrogateLoss, stats_to_host
from ludic_train.losses._ratio import token_log_ratio
from ludic_train.losses.base import TokenLogpContext
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

PAD = 0

# Sampling decodes incrementally with a KV cache over left-padded batches, the trainer runs one full
# forward over right-padded rows: the same logprob comes out of different kernels and differs in the last
# bits (up to ~1e-5 in fp32 on CPU). 1e-4 on the ratio leaves room for that and nothing else: a wrong
# temperature moves ratios by more than 0.05 here.
RATIO_TOLERANCE = 1e-4


class TwoTurnEnv(SingleAgentEnv):
    """Two steps, so the items include a second turn whose prompt holds the first turn's sample."""

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        self.turns = 0
        return "Say something.", {}

    def env_step(self, action: str) -> StepOutcome:
        self.turns += 1
        return StepOutcome(obs="Again.", reward=float(len(action) % 3), terminated=self.turns >= 2)


def _accept_anything(text: str) -> ParseResult:
    return ParseResult(action=text)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return bpe_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> torch.nn.Module:
    model = tiny_causal_lm(tokenizer, seed=0)
    # A freshly initialised model is nearly uniform (logit std 0.17), where temperature matters little;
    # a 4x sharper head (std 0.66, still far from greedy) makes a wrong temperature show clearly.
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model


def _sample_items(model: torch.nn.Module, tokenizer: Any, temperature: float) -> list[SAWItem]:
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=temperature, max_tokens=6), return_=ReturnSpec.for_rl()
    )
    client = LocalPolicyClient(model, tokenizer, seed=0)

    def protocol() -> SingleAgentProtocol:
        agent = ScriptedAgent(
            client,
            parser=_accept_anything,
            encode=lambda s: tokenizer.encode(s, add_special_tokens=False),
            inference=spec,
            incomplete_completion_penalty=0.0,
        )
        return SingleAgentProtocol(agent)

    engine = RolloutEngine(
        env_factories={"two_turns": TwoTurnEnv}, protocol_factories={"agent": protocol}, base_seed=0
    )
    requests = [
        RolloutRequest(
            env=EnvSpec("two_turns"), protocol=ProtocolSpec("agent"), inference=spec, sampling_seed=s
        )
        for s in range(4)
    ]

    async def run() -> list[SAWItem]:
        try:
            result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=4))
        finally:
            await client.aclose()
        assert not result.failed_episodes
        rollouts = result.rollouts
        return build_saw_items(rollouts, ConstantCredit(1.0).compute(rollouts), require_actor_logps=True)

    return asyncio.run(run())


def _ratios(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The clipped surrogate's per-token ratios ``exp(log π − log μ)`` over every action token."""
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            logits_to_keep=batch["logit_positions"],
        ).logits
        ctx = TokenLogpContext(logits, batch)
        return token_log_ratio(ctx, batch, who="test").exp()[ctx.mask_bool]


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_on_policy_ratios_are_one_at_the_sampling_temperature(
    model: torch.nn.Module, tokenizer: Any, temperature: float
) -> None:
    items = _sample_items(model, tokenizer, temperature)
    assert len(items) >= 8 and {i.sampling_temperature for i in items} == {temperature}
    assert any(i.meta["turn_index"] == 1 for i in items)  # later turns: prompts hold earlier samples
    batch = collate_saw_items(items, pad_token_id=PAD)

    ratios = _ratios(model, batch)
    assert ratios.numel() == sum(i.num_action_tokens for i in items)
    assert float((ratios - 1).abs().max()) <= RATIO_TOLERANCE
    _, stats = TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, batch
    )
    host = stats_to_host(stats)
    assert host["ratio_mean"] == pytest.approx(1.0, abs=RATIO_TOLERANCE) and host["clip_frac"] == 0.0

    # Scored untempered (what the trainer did before items carried their temperature), the behaviour
    # logprobs at T=0.7 are those of another distribution and the ratios are far from 1.
    untempered = _ratios(model, {k: v for k, v in batch.items() if k != "temperature"})
    if temperature == 0.7:
        assert float((untempered - 1).abs().max()) > 0.05
    else:  # 1.0, and greedy, whose logprobs clients return untempered
        torch.testing.assert_close(untempered, ratios, rtol=0, atol=0)
