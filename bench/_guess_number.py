"""The GuessNumber rollout setup both engine benchmarks run: scripted replies, byte tokens, RL returns."""

from __future__ import annotations

from ludic_core.engine import RolloutEngine
from ludic_core.inference import InferenceSpec, ReturnSpec
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient

REPLIES = ["5", "3", "8", "1", "9", "2", "7", "4", "6", "10"]
INFERENCE = InferenceSpec(return_=ReturnSpec.for_rl())


def make_client(latency_s: float = 0.0) -> ScriptedChatClient:
    """A zero-cost model that cycles through REPLIES, after ``latency_s`` per call."""
    return ScriptedChatClient(REPLIES, cycle=True, latency_s=latency_s)


def make_engine(latency_s: float = 0.0) -> RolloutEngine:
    client = make_client(latency_s)
    return RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
    )


def requests(episodes: int) -> list[RolloutRequest]:
    """Episodes with env and sampling seeds 0..episodes-1."""
    return [
        RolloutRequest(
            EnvSpec("guess"), ProtocolSpec("single"), env_seed=e, sampling_seed=e, inference=INFERENCE
        )
        for e in range(episodes)
    ]
