"""A toy RL setup for CPU learning tests: a tiny random model learns to answer with digits.

``DigitsEnv`` is one step long; its reward is the fraction of the answer's characters that are digits.
The test tokenizer's vocabulary is trained on arithmetic text and holds many number tokens, so a random
tiny model starts near 0.35-0.4 (four-token answers) and GRPO raises it toward 1.0 within 20 steps.
Every seed is explicit, so a run repeats (bit for bit when the sampler batches the same requests
together and torch uses the same number of threads; see ``LocalPolicyClient``).
"""

from __future__ import annotations

from typing import Any

import attrs

from ludic_core import RolloutSettings
from ludic_core.algorithms import AlgorithmSpec
from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.engine import RolloutEngine
from ludic_core.env import SingleAgentEnv
from ludic_core.harness import DEFAULT_ACT_OPTIONS, ActOptions, AgentActResult
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.parsing import ParseResult
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import ScriptedAgent
from ludic_core.types import Info, StepOutcome
from ludic_train.local_client import LocalPolicyClient


class DigitsEnv(SingleAgentEnv):
    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return "Say a number.", {}

    def env_step(self, action: str) -> StepOutcome:
        chars = [c for c in action if not c.isspace()]
        reward = sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0
        return StepOutcome(obs="", reward=reward, terminated=True)


def any_text_parser(text: str) -> ParseResult:
    # Every completion reaches the env (an empty one scores 0), so the reward is a pure function of
    # the sampled text.
    return ParseResult(action=text)


class CompletionIsActionAgent(ScriptedAgent):
    """ScriptedAgent that accepts a completion cut by ``max_tokens`` as the action: a random tiny model
    almost never samples eos, and the toy reward should not hinge on it."""

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        result = await super().act(options)
        final = result.final_step
        if final.info.get("incomplete_completion"):
            info = {k: v for k, v in final.info.items() if k != "incomplete_completion"}
            final = attrs.evolve(final, parse_result=any_text_parser(final.action), info=info)
            return AgentActResult(steps=[*result.steps[:-1], final])
        return result


def make_online_source(
    tokenizer: Any,
    client: LocalPolicyClient,
    algorithm: AlgorithmSpec,
    *,
    group_size: int,
    groups_per_step: int,
    max_tokens: int = 4,
    seed: int = 0,
) -> RolloutBatchSource:
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens), return_=ReturnSpec.for_rl()
    )

    def protocol() -> SingleAgentProtocol:
        agent = CompletionIsActionAgent(
            client,
            parser=any_text_parser,
            encode=lambda s: tokenizer.encode(s, add_special_tokens=False),
            inference=spec,
            incomplete_completion_penalty=0.0,
        )
        return SingleAgentProtocol(agent)

    engine = RolloutEngine(
        env_factories={"digits": DigitsEnv}, protocol_factories={"agent": protocol}, base_seed=seed
    )

    def requests(step: int) -> list[RolloutRequest]:
        # A fresh strategy per step seeded from (seed, step): the requests are a pure function of the
        # step, so a resumed run samples exactly what an uninterrupted one would.
        strategy = GRPORequestStrategy(group_size=group_size, seed=derive_seed(seed, "grpo", step))
        base = RolloutRequest(env=EnvSpec("digits"), protocol=ProtocolSpec("agent"), inference=spec)
        return strategy.expand([base] * groups_per_step)

    return RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=requests,
        settings=RolloutSettings(max_steps=1, concurrency=64),
    )
