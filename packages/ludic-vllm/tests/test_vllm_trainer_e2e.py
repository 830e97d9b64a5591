"""CPU end to end: ludic-train's Trainer trains the tiny model for a few steps, publishing every step
to a real vLLM server over Gloo; the rollouts used for step k+1 were sampled by the server after
publish k, and carry policy version k."""

from __future__ import annotations

from typing import Any

import pytest

from ludic_core import RolloutSettings

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


async def test_trainer_publishes_each_step_and_rollouts_carry_its_version(vllm_server: Any) -> None:
    pytest.importorskip("ludic_train")
    from transformers import AutoTokenizer

    from ludic_core.algorithms import grpo
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.engine import RolloutEngine
    from ludic_core.env import SingleAgentEnv
    from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
    from ludic_core.parsing import ParseResult
    from ludic_core.protocols.single_agent import SingleAgentProtocol
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.saw import SAWBatch
    from ludic_core.seeding import derive_seed
    from ludic_core.strategies import GRPORequestStrategy
    from ludic_core.testing import ScriptedAgent
    from ludic_core.types import Info, StepOutcome
    from ludic_train.config import TrainerConfig
    from ludic_train.trainer import Trainer
    from ludic_vllm.client import VLLMClient
    from ludic_vllm.publisher import GlooPublisher, PublishSettings
    from ludic_vllm.testing import load_hf_model

    class VowelsEnv(SingleAgentEnv):
        """One step; reward = fraction of vowels in the answer (varies between samples)."""

        def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
            return "Say something.", {}

        def env_step(self, action: str) -> StepOutcome:
            chars = [c for c in action if not c.isspace()]
            reward = sum(c in "aeiouAEIOU" for c in chars) / len(chars) if chars else 0.0
            return StepOutcome(obs="", reward=reward, terminated=True)

    def take_everything(text: str) -> ParseResult:
        return ParseResult(action=text)

    tokenizer = AutoTokenizer.from_pretrained(str(vllm_server.model_dir))
    model = load_hf_model(vllm_server.model_dir)
    spec = InferenceSpec(sampling=SamplingParams(temperature=1.0, max_tokens=8), return_=ReturnSpec.for_rl())
    client = VLLMClient(base_url=vllm_server.url, model="tiny", request_timeout_s=120)

    def protocol() -> SingleAgentProtocol:
        agent = ScriptedAgent(
            client,
            parser=take_everything,
            encode=lambda s: tokenizer.encode(s, add_special_tokens=False),
            inference=spec,
            incomplete_completion_penalty=0.0,
        )
        return SingleAgentProtocol(agent)

    engine = RolloutEngine(
        env_factories={"vowels": VowelsEnv}, protocol_factories={"agent": protocol}, base_seed=0
    )

    def requests(step: int) -> list[RolloutRequest]:
        strategy = GRPORequestStrategy(group_size=4, seed=derive_seed(0, "grpo", step))
        base = RolloutRequest(env=EnvSpec("vowels"), protocol=ProtocolSpec("agent"), inference=spec)
        return strategy.expand([base] * 2)

    algorithm = grpo(group_size=4)
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=requests,
        settings=RolloutSettings(max_steps=1, concurrency=8),
    )
    seen_versions: list[set[Any]] = []

    class RecordingSource:
        async def next_batch(self) -> SAWBatch:
            batch = await source.next_batch()
            seen_versions.append({item.meta.get("policy_version") for item in batch.items})
            return batch

    publisher = GlooPublisher(
        vllm_server.url,
        connect_timeout_s=60,
        settings=PublishSettings(timeout_s=120, allow_version_reset=True),
    )
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=RecordingSource(),
        config=TrainerConfig(pad_token_id=0, device="cpu", lr=1e-2, max_seq_len=128, max_lag=0),
        publisher=publisher,
    )
    try:
        # A fresh run: the server starts this run at version 0 with the trainer's initial weights.
        await trainer.publish()
        assert await client.get_policy_version() == 0
        steps = 3
        results = await trainer.train(steps)
        assert len(results) == steps
        assert await client.get_policy_version() == steps
    finally:
        await trainer.aclose()
        await client.aclose()
    # The batch trained at step k+1 was sampled after publish k, so every item carries version k.
    assert seen_versions == [{k} for k in range(steps)]
    # The server now holds the trained weights: greedy vLLM == greedy transformers on the trained model.
    from ludic_core.inference import TokenCompletionRequest
    from ludic_vllm.testing import hf_greedy

    prompt = tokenizer.encode("Say something.", add_special_tokens=False)
    async with VLLMClient(base_url=vllm_server.url, model="tiny") as check:
        greedy = await check.complete_tokens(
            TokenCompletionRequest(
                prompt_token_ids=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=16)
            )
        )
    assert list(greedy.completion_token_ids) == hf_greedy(model.eval(), prompt, 16)
    assert greedy.policy_version == steps
