"""Hand-built rollouts, an engine factory and item probes for the data-plane tests (credit, SAW builder,
engine, packed items)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ludic_core.engine import RolloutEngine
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.saw import SAWItem
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient
from ludic_core.types import AgentStep, EnvironmentStep, Rollout, TokenTrace


def trace(
    prompt: Sequence[int], completion: Sequence[int], logps: Sequence[float] | None = None
) -> TokenTrace:
    return TokenTrace(prompt_token_ids=prompt, completion_token_ids=completion, completion_logprobs=logps)


def agent_step(
    index: int,
    turn_id: str,
    tr: TokenTrace,
    *,
    target: str = "env",
    reward: float = 0.0,
    parse_error: bool = False,
    **kwargs: Any,
) -> AgentStep:
    return AgentStep(
        index=index,
        trace=tr,
        prompt_messages=[],
        action="a",
        action_target=target,  # type: ignore[arg-type]
        turn_id=turn_id,
        reward=reward,
        parse_error=parse_error,
        **kwargs,
    )


def env_step(
    index: int, turn_id: str, tr: TokenTrace, *, reward: float = 0.0, **kwargs: Any
) -> EnvironmentStep:
    return EnvironmentStep(
        index=index,
        trace=tr,
        prev_obs="o",
        action="a",
        parsed_action="a",
        next_obs=None,
        turn_id=turn_id,
        source_agent_step_id="src",
        agent_step_ids=("src",),
        reward=reward,
        **kwargs,
    )


def one_turn_rollout(reward: float, *, group_id: str | None = None, rollout_id: str | None = None) -> Rollout:
    """An episode of one turn: a model call and an env step with ``reward``."""
    tr = trace([1, 2], [3])
    meta: dict[str, Any] = {"agent_id": "agent_0"}
    if group_id is not None:
        meta["request_meta"] = {"group_id": group_id}
        meta["group_id"] = group_id
    rollout = Rollout(steps=[agent_step(0, "t0", tr), env_step(1, "t0", tr, reward=reward)], meta=meta)
    if rollout_id is not None:
        rollout.id = rollout_id
    return rollout


def guess_engine(*, base_seed: int = 0, choices: Sequence[str] | None = None, **kwargs: Any) -> RolloutEngine:
    """An engine over GuessNumberEnv with a seeded scripted client (zero latency)."""
    client = SeededChatClient(list(choices) if choices is not None else [str(i) for i in range(1, 6)] + ["x"])

    def protocol() -> SingleAgentProtocol:
        return SingleAgentProtocol(ScriptedAgent(client))

    return RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": protocol},
        base_seed=base_seed,
        **kwargs,
    )


def still_packed(item: SAWItem, field: str) -> bool:
    """Whether a packed item's ``field`` has not been unpacked yet: ``SAWItem``'s own slot is empty."""
    try:
        SAWItem.__dict__[field].__get__(item, SAWItem)
    except AttributeError:
        return True
    return False
