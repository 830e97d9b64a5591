from __future__ import annotations

from collections.abc import Iterator

import pytest

from ludic_core.errors import ConfigError, DataError, ProtocolError
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.registry import make_env
from ludic_core.testing import ScriptedAgent, ScriptedChatClient
from ludic_envs.codeexec import CodeExecEnv, SandboxLimits, SandboxPool, strip_code_fence

TASK = {
    "task_id": "add",
    "prompt": "Write add(a, b).",
    "tests": [
        "assert add(1, 2) == 3",
        "assert add(0, 0) == 0",
        "assert add(-2, 2) == 0",
        "assert add(2, 2) == 4",
    ],
}
ALMOST = "def add(a, b):\n    return a + b if a >= 0 else 1\n"  # fails one test


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(max_concurrency=2, limits=SandboxLimits(cpu_s=1, wall_s=2.0)) as p:
        yield p


def test_fraction_reward_and_info(pool: SandboxPool) -> None:
    env = CodeExecEnv(TASK, pool=pool)
    obs, info = env.reset()["agent_0"]
    assert obs == TASK["prompt"] and info == {"num_tests": 4, "task_id": "add"}
    out = env.step({"agent_0": f"Here:\n```python\n{ALMOST}```\n"})["agent_0"]
    assert out.terminated and out.reward == pytest.approx(0.75)
    assert out.info["passed"] == 3 and out.info["total"] == 4 and len(out.info["tests"]) == 4
    assert "Passed 3/4" in out.obs and "AssertionError" in out.obs
    with pytest.raises(ProtocolError, match="already graded"):
        env.step({"agent_0": ALMOST})


def test_all_or_nothing(pool: SandboxPool) -> None:
    env = CodeExecEnv(TASK, pool=pool, reward_mode="all_or_nothing", correct_reward=2.0)
    env.reset()
    out = env.step({"agent_0": ALMOST})["agent_0"]
    assert out.reward == 0.0 and out.info["skipped"] == 1  # the 4th test never ran
    env.reset()
    assert env.step({"agent_0": "def add(a, b): return a + b"})["agent_0"].reward == 2.0


def test_limits_are_reported_in_feedback(pool: SandboxPool) -> None:
    env = CodeExecEnv({"prompt": "p", "tests": [{"input": "", "output": "1"}]}, pool=pool)
    env.reset()
    out = env.step({"agent_0": "while True: pass"})["agent_0"]
    assert out.reward == 0.0 and "time limit" in out.obs
    assert out.info["limits_hit"] and out.info["limits_hit"][0] in ("cpu_time", "wall_time")


def test_empty_program_is_not_run(pool: SandboxPool) -> None:
    env = CodeExecEnv(TASK, pool=pool, no_code_reward=-0.5)
    env.reset()
    out = env.step({"agent_0": "```python\n\n```"})["agent_0"]
    assert out.reward == -0.5 and out.info["code_found"] is False


def test_bad_config_and_rows() -> None:
    with pytest.raises(ConfigError, match="reward_mode"):
        CodeExecEnv(TASK, reward_mode="partial")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="exactly one"):
        CodeExecEnv()
    with pytest.raises(DataError, match="'tests'"):
        CodeExecEnv({"prompt": "p"}).reset()
    assert strip_code_fence("a\n```py\nx = 1\n```\nb") == "x = 1\n"
    assert strip_code_fence("x = 2") == "x = 2"


async def test_through_the_registry_and_protocol(pool: SandboxPool) -> None:
    env = make_env("code_exec", sample=TASK, pool=pool, limits={"wall_s": 2.0, "cpu_s": 1.0})
    agent = ScriptedAgent(ScriptedChatClient(["```python\ndef add(a, b):\n    return a + b\n```"]))
    [rollout] = await SingleAgentProtocol(agent).run(env=env, max_steps=3, env_seed=0)
    assert rollout.failure is None and rollout.total_reward == 1.0


async def test_protocol_step_does_not_block_the_event_loop(pool: SandboxPool) -> None:
    """While a program runs, other coroutines (other episodes of the engine) keep running."""
    import asyncio

    env = CodeExecEnv(sample={"prompt": "p", "tests": ["assert True"]}, pool=pool)
    env.reset(seed=0)
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    ticks_before = ticks
    outcomes = await env.astep({env.agent_id: "import time\ntime.sleep(0.4)\n"})
    ticks_during = ticks - ticks_before
    stop.set()
    await task
    assert outcomes[env.agent_id].reward == 1.0
    assert ticks_during >= 5  # a blocking step would allow none
