"""Sum of products: a parent delegates each product to a sub-agent and adds the answers."""

from __future__ import annotations

import re

import pytest

from ludic_core import RolloutSettings, make_env
from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.protocols import DelegatingProtocol, DelegationSettings
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.testing import ScriptedAgent, ScriptedChatClient
from ludic_envs.delegation import ProductQAEnv, SumOfProductsEnv

PRODUCT = re.compile(r"(\d+) × (\d+)")
TOOL_RESULT = re.compile(r"<\|tool\|>(.*)\n")


def parent_policy(request: TokenCompletionRequest, _call_index: int) -> str:
    """Delegate the products one by one (one call per act), then add the sub-agents' answers."""
    assert request.prompt_text is not None
    user = request.prompt_text.split("<|user|>", 1)[1]
    products = PRODUCT.findall(user.split("\n", 1)[0])
    answers = TOOL_RESULT.findall(request.prompt_text)
    if len(answers) < len(products):
        a, b = products[len(answers)]
        return f'CALL delegate {{"task": "{a} × {b}"}}'
    return str(sum(int(x) for x in answers))


def child_policy(off_by: int) -> ScriptedChatClient:
    def answer(request: TokenCompletionRequest, _call_index: int) -> str:
        assert request.prompt_text is not None
        a, b = PRODUCT.findall(request.prompt_text)[-1]
        return str(int(a) * int(b) + off_by)

    return ScriptedChatClient(answer)


def parent_agent() -> ScriptedAgent:
    return ScriptedAgent(ScriptedChatClient(parent_policy), external_tools=("delegate",))


def protocol(off_by: int = 0, settings: DelegationSettings | None = None) -> DelegatingProtocol:
    return DelegatingProtocol(
        parent_agent(),
        child_agent_factory=lambda: ScriptedAgent(child_policy(off_by)),
        child_env_factory=ProductQAEnv.from_arguments,
        settings=settings or DelegationSettings(),
    )


async def test_delegating_every_product_gives_the_right_sum() -> None:
    env = SumOfProductsEnv(num_parts=3)
    root, *children = await protocol(settings=DelegationSettings(child_reward="sum")).run(
        env=env, max_steps=2, env_seed=4
    )
    assert len(env.parts) == 3 and len(children) == 3
    final = root.env_steps[-1]
    assert final.parsed_action == str(env.target) and final.info["correct"] is True
    assert final.info["target"] == sum(a * b for a, b in env.parts)
    assert root.total_reward == 1.0
    for child, (a, b) in zip(children, env.parts, strict=True):
        step = child.env_steps[-1]
        assert step.prev_obs == f"Compute {a} × {b}. Reply with the number only."
        assert step.info["correct"] is True and step.info["child_env_reward"] == 1.0
        assert child.total_reward == 1.0 + 1.0  # "sum": its own reward plus the parent's
    calls = [s for s in root.agent_steps if s.action_target == "external"]
    assert [r.content for s in calls for r in s.tool_results or ()] == [str(a * b) for a, b in env.parts]


async def test_a_wrong_part_makes_the_sum_wrong_and_the_default_credit_follows_the_parent() -> None:
    env = SumOfProductsEnv(num_parts=2)
    root, *children = await protocol(off_by=1).run(env=env, max_steps=2, env_seed=4)
    assert root.env_steps[-1].info["correct"] is False and root.total_reward == 0.0
    assert root.env_steps[-1].parsed_action == str(env.target + 2)
    # Each sub-agent's own answer was wrong too (reward 0, kept in the info); "parent" credit is 0.
    assert [c.env_steps[-1].info["correct"] for c in children] == [False, False]
    assert [c.total_reward for c in children] == [0.0, 0.0]


async def test_through_the_engine_by_name() -> None:
    spec = ProtocolSpec(
        "delegating",
        {
            "agent_factory": parent_agent,
            "child_agent_factory": lambda: ScriptedAgent(child_policy(0)),
            "child_env_factory": ProductQAEnv.from_arguments,
        },
    )
    requests = [RolloutRequest(env=EnvSpec("sum_of_products", {"num_parts": 2}), protocol=spec)] * 2
    result = await RolloutEngine().generate_rollouts(requests, RolloutSettings(max_steps=2))
    assert not result.failed_episodes and len(result.rollouts) == 6
    assert [r.meta["agent_id"] for r in result.rollouts] == ["agent_0", "child@0", "child@1"] * 2
    assert all(r.total_reward == 1.0 for r in result.rollouts)


def test_envs_are_seeded_and_check_their_input() -> None:
    first, second = SumOfProductsEnv(), SumOfProductsEnv()
    assert first.reset(seed=3) == second.reset(seed=3)
    assert first.reset(seed=3) != first.reset(seed=4)
    obs, info = first.reset(seed=3)["agent_0"]
    assert obs == f"Compute {first.question}. Reply with the number only." and len(info["parts"]) == 3
    outcome = first.step({"agent_0": f"The sum is {first.target:,}."})["agent_0"]
    assert outcome.reward == 1.0 and outcome.terminated
    with pytest.raises(ConfigError, match="after the answer"):
        first.step({"agent_0": "1"})

    env = ProductQAEnv.from_arguments({"task": "What is 12 x 34?"})
    assert (env.a, env.b) == (12, 34)
    env.reset()
    assert env.step({"agent_0": "408"})["agent_0"].reward == 1.0
    assert ProductQAEnv.from_arguments({"a": 2, "b": 3}).target == 6
    with pytest.raises(ConfigError, match="no product such as"):
        ProductQAEnv.from_arguments({"task": "twelve times four"})
    with pytest.raises(ConfigError, match="needs a string 'task'"):
        ProductQAEnv.from_arguments({"question": "2 × 3"})
    with pytest.raises(ConfigError, match="num_parts must be an int >= 1, got 0"):
        SumOfProductsEnv(num_parts=0)
    assert isinstance(make_env("product_qa", a=3, b=4), ProductQAEnv)
