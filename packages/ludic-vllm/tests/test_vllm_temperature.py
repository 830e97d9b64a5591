"""Training scores the distribution vLLM sampled from: rollouts sampled by the real server at temperature
T, turned into SAW items by the SAW builder and collated by ludic-train, give the GRPO loss on-policy
importance ratios of 1 when the trainer (transformers, the same weights) scores them."""

from __future__ import annotations

from typing import Any

import pytest

from ludic_core import RolloutSettings

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

# vLLM (paged KV cache, its CPU attention kernels) and transformers (one eager forward over right-padded
# rows) compute the same logprobs with different kernels; test_vllm_server checks that they agree within
# 2e-3, so on-policy ratios are within about that of 1. A trainer that ignored the sampling temperature
# would be off by far more (> 0.05 at T = 0.7 on this model).
RATIO_TOLERANCE = 5e-3


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
async def test_on_policy_ratios_are_one_at_the_sampling_temperature(
    vllm_server: Any, temperature: float
) -> None:
    pytest.importorskip("ludic_train")
    import torch
    from transformers import AutoTokenizer

    from ludic_core.credit import ConstantCredit
    from ludic_core.engine import RolloutEngine
    from ludic_core.env import SingleAgentEnv
    from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
    from ludic_core.parsing import ParseResult
    from ludic_core.protocols.single_agent import SingleAgentProtocol
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.saw_builder import build_saw_items
    from ludic_core.testing import ScriptedAgent
    from ludic_core.types import Info, StepOutcome
    from ludic_train.collate import collate_saw_items
    from ludic_train.losses import TokenClippedSurrogateLoss, stats_to_host
    from ludic_train.losses._ratio import token_log_ratio
    from ludic_train.losses.base import TokenLogpContext
    from ludic_vllm.client import VLLMClient
    from ludic_vllm.control import ServerControl
    from ludic_vllm.publisher import FilePublisher, PublishSettings
    from ludic_vllm.testing import load_hf_model, state_dict_copy

    class TwoTurnEnv(SingleAgentEnv):
        def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
            self.turns = 0
            return "Tell a story.", {}

        def env_step(self, action: str) -> StepOutcome:
            self.turns += 1
            return StepOutcome(obs="Go on.", reward=1.0, terminated=self.turns >= 2)

    def accept_anything(text: str) -> ParseResult:
        return ParseResult(action=text)

    # The trainer's model and the server hold the same weights: publish them under a fresh version.
    model = load_hf_model(vllm_server.model_dir)
    async with ServerControl(vllm_server.url) as control:
        version = await control.version() + 1
    publisher = FilePublisher(vllm_server.url, mode="upload", settings=PublishSettings(timeout_s=60))
    try:
        await publisher.publish(state_dict_copy(model), version=version)
    finally:
        await publisher.aclose()

    tokenizer = AutoTokenizer.from_pretrained(str(vllm_server.model_dir))
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=temperature, max_tokens=12), return_=ReturnSpec.for_rl()
    )
    async with VLLMClient(base_url=vllm_server.url, model="tiny", request_timeout_s=120) as client:

        def protocol() -> SingleAgentProtocol:
            agent = ScriptedAgent(
                client,
                parser=accept_anything,
                encode=lambda s: tokenizer.encode(s, add_special_tokens=False),
                inference=spec,
                incomplete_completion_penalty=0.0,
            )
            return SingleAgentProtocol(agent)

        engine = RolloutEngine(
            env_factories={"story": TwoTurnEnv}, protocol_factories={"agent": protocol}, base_seed=0
        )
        requests = [
            RolloutRequest(
                env=EnvSpec("story"), protocol=ProtocolSpec("agent"), inference=spec, sampling_seed=s
            )
            for s in range(4)
        ]
        result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=2))
    assert not result.failed_episodes
    rollouts = result.rollouts
    items = build_saw_items(rollouts, ConstantCredit(1.0).compute(rollouts), require_actor_logps=True)
    assert {item.sampling_temperature for item in items} == {temperature}
    assert {item.meta["policy_version"] for item in items} == {version}
    batch = collate_saw_items(items, pad_token_id=0)

    def ratios(scored: dict[str, Any]) -> Any:
        with torch.no_grad():
            logits = model(
                input_ids=scored["input_ids"],
                attention_mask=scored["attention_mask"],
                logits_to_keep=scored["logit_positions"],
            ).logits
            ctx = TokenLogpContext(logits, scored)
            return token_log_ratio(ctx, scored, who="test").exp()[ctx.mask_bool]

    on_policy = ratios(batch)
    assert on_policy.numel() == sum(item.num_action_tokens for item in items) > 0
    assert float((on_policy - 1).abs().max()) <= RATIO_TOLERANCE
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        host = stats_to_host(
            TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(logits, batch)[1]
        )
    assert host["ratio_mean"] == pytest.approx(1.0, abs=RATIO_TOLERANCE)
    assert host["clip_frac"] == 0.0
    # Scored untempered, the logprobs vLLM returned at T = 0.7 belong to another distribution.
    untempered = ratios({k: v for k, v in batch.items() if k != "temperature"})
    if temperature == 0.7:
        assert float((untempered - 1).abs().max()) > 0.05
    else:  # 1.0, and greedy, whose processed logprobs vLLM computes before any temperature
        assert torch.equal(untempered, on_policy)
