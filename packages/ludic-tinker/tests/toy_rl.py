"""A toy RL task for the Tinker tests, run through ludic-core's real pipeline.

``LowercaseEnv``: one turn; the reward is the fraction of the answer's characters that are lowercase
ASCII letters. A randomly initialised byte-level model hits one about one token in ten, so a few GRPO
steps visibly raise the reward. Rollouts come from ``RolloutEngine`` + ``SingleAgentProtocol`` +
``ScriptedAgent`` sampling through ``TinkerChatClient``; credit from ``GroupNormalizedReturn``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ludic_core import RolloutSettings
from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.credit import GroupNormalizedReturn
from ludic_core.engine import RolloutEngine
from ludic_core.env import SingleAgentEnv
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import ScriptedAgent
from ludic_core.types import Info, StepOutcome
from ludic_tinker import TinkerChatClient
from ludic_tinker.testing import FakeTokenizer


class LowercaseEnv(SingleAgentEnv):
    def __init__(self) -> None:
        super().__init__(agent_id="agent_0")

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return "say something", {}

    def env_step(self, action: str) -> StepOutcome:
        letters = sum(ch.isascii() and ch.islower() for ch in action)
        return StepOutcome(obs="done", reward=letters / max(1, len(action)), terminated=True)


def lowercase_batch_source(
    client: TinkerChatClient, *, groups: int, group_size: int, max_tokens: int, seed: int = 0
) -> RolloutBatchSource:
    tokenizer = FakeTokenizer()
    inference = InferenceSpec(
        sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens), return_=ReturnSpec.for_rl()
    )

    def protocol() -> SingleAgentProtocol:
        return SingleAgentProtocol(ScriptedAgent(client, encode=tokenizer.encode, inference=inference))

    engine = RolloutEngine(
        env_factories={"lowercase": LowercaseEnv}, protocol_factories={"single": protocol}, base_seed=seed
    )
    strategy = GRPORequestStrategy(group_size=group_size, seed=seed)

    def requests(step: int) -> Sequence[RolloutRequest]:
        base = [
            # Tinker scores logprobs at temperature 1, so the ratio-based losses need samples drawn at 1.
            RolloutRequest(env=EnvSpec("lowercase"), protocol=ProtocolSpec("single"), inference=inference)
            for _ in range(groups)
        ]
        return strategy.expand(base)

    return RolloutBatchSource(
        engine=engine,
        credit_assigner=GroupNormalizedReturn(group_size=group_size, normalize_adv=True),
        requests=requests,
        settings=RolloutSettings(max_steps=1),
    )
