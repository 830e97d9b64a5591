"""DelegatingProtocol: child episodes behind a delegate tool call, their rollouts, links and credit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from ludic_core import RolloutSettings
from ludic_core.credit import GroupNormalizedReturn, group_key
from ludic_core.engine import RolloutEngine
from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError, TransportError
from ludic_core.harness import DEFAULT_ACT_OPTIONS, ActOptions, AgentActResult
from ludic_core.inference import InferenceSpec, TokenCompletionRequest
from ludic_core.parsing import ParseResult
from ludic_core.protocols import DelegatingProtocol, DelegationSettings, SubtaskEnv
from ludic_core.registry import PROTOCOLS, make_protocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.testing import ScriptedAgent, ScriptedChatClient
from ludic_core.types import AgentStep, Info, Rollout, StepOutcome, ToolCall, ToolResult

# -- scripted sub-agents ------------------------------------------------------------------------------
#
# Every agent here shares one policy that reads the last message of its prompt (the test agent renders
# one "<|role|>content" line per message): a task "chain:<n>:<answer>" is delegated as
# "chain:<n-1>:<answer>" while n > 0 and answered with <answer> at n == 0; a tool result is passed on
# as the answer. So "chain:2:7" given to the root makes root -> child -> grandchild, and "7" travels up.


def last_message(prompt_text: str) -> tuple[str, str]:
    lines = prompt_text.removesuffix("<|assistant|>").rstrip("\n").split("\n")
    role, _, content = lines[-1].removeprefix("<|").partition("|>")
    return role, content


def chain_policy(request: TokenCompletionRequest, _call_index: int) -> str:
    assert request.prompt_text is not None
    role, content = last_message(request.prompt_text)
    if role == "tool":
        return content
    _, depth, answer = content.split(":")
    if int(depth) == 0:
        return answer
    return "CALL delegate " + json.dumps({"task": f"chain:{int(depth) - 1}:{answer}"})


def chain_agent(**kwargs: Any) -> ScriptedAgent:
    return ScriptedAgent(ScriptedChatClient(chain_policy), external_tools=("delegate", "lookup"), **kwargs)


class ExactAnswerEnv(SingleAgentEnv):
    """One question; reward 1 for the expected answer, else 0. ``expected`` may depend on the seed."""

    def __init__(self, question: str = "chain:2:7", expected: str = "7", *, reward: float = 1.0) -> None:
        super().__init__()
        self.question = question
        self.expected = expected
        self.reward = reward

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return self.question, {}

    def env_step(self, action: str) -> StepOutcome:
        correct = action.strip() == self.expected
        return StepOutcome(
            obs="Done.", reward=self.reward if correct else 0.0, terminated=True, info={"correct": correct}
        )


async def run_protocol(protocol: DelegatingProtocol, env: SingleAgentEnv, **kw: Any) -> list[Rollout]:
    return await protocol.run(env=env, max_steps=3, env_seed=11, sampling_seed=5, **kw)


def external_steps(rollout: Rollout) -> list[AgentStep]:
    return [s for s in rollout.agent_steps if s.action_target == "external"]


# -- the tree: results, order, links ------------------------------------------------------------------


async def test_two_levels_of_delegation_bring_the_answer_back_and_link_every_rollout() -> None:
    protocol = DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent)
    root, child, grandchild = await run_protocol(protocol, ExactAnswerEnv("chain:2:7", "7"))

    # The answer travels up: grandchild answers, child passes it on, the root gets it as a tool result.
    assert [s.parsed_action for s in grandchild.env_steps] == ["7"]
    [child_call] = external_steps(child)
    assert child_call.tool_results is not None and child_call.tool_results[0].content == "7"
    [root_call] = external_steps(root)
    assert root_call.tool_calls is not None and root_call.tool_results is not None
    assert [r.content for r in root_call.tool_results] == ["7"]
    assert root_call.tool_results[0].tool_call_id == root_call.tool_calls[0].id
    assert root.env_steps[-1].info["correct"] is True and root.total_reward == 1.0
    assert all(r.failure is None for r in (root, child, grandchild))

    # Links: parent first, then depth-first.
    assert root.meta["delegation_role"] == "root" and root.meta["delegation_depth"] == 0
    assert root.meta["protocol"] == "delegating"
    assert root.meta["child_rollout_ids"] == [child.id]
    assert child.meta["child_rollout_ids"] == [grandchild.id]
    assert grandchild.meta["child_rollout_ids"] == []
    for rollout, parent, call, depth, path in (
        (child, root, root_call, 1, "0"),
        (grandchild, child, child_call, 2, "0.0"),
    ):
        assert call.tool_calls is not None
        assert rollout.meta["parent_rollout_id"] == parent.id
        assert rollout.meta["delegate_call_id"] == call.tool_calls[0].id
        assert rollout.meta["parent_turn_index"] == 0  # the first (and only) turn of the parent
        assert rollout.meta["parent_step_index"] == call.index
        assert rollout.meta["delegation_depth"] == depth
        assert rollout.meta["delegation_role"] == "child"
        assert rollout.meta["delegation_path"] == path
        assert rollout.meta["agent_id"] == f"child@{path}"
        assert rollout.meta["env_agent_id"] == "agent_0"
        assert rollout.meta["env_name"] == "SubtaskEnv"
    # The child saw only its own task, in its own context.
    assert child.agent_steps[0].prompt_messages[-1] == {"role": "user", "content": "chain:1:7"}


async def test_the_parent_turn_index_is_the_turn_of_the_call() -> None:
    """A parse failure first (turn 0), then the delegate call in turn 1."""
    scripted = ["", 'CALL delegate {"task": "chain:0:5"}']

    def parent_policy(request: TokenCompletionRequest, call_index: int) -> str:
        return scripted[call_index] if call_index < len(scripted) else chain_policy(request, call_index)

    parent = ScriptedAgent(ScriptedChatClient(parent_policy), external_tools=("delegate",))
    protocol = DelegatingProtocol(parent, child_agent_factory=chain_agent)
    root, child = await run_protocol(protocol, ExactAnswerEnv("q", "5"))
    assert root.agent_steps[0].parse_error
    assert child.meta["parent_turn_index"] == 1
    assert root.total_reward == -1.0 + 1.0


# -- credit -------------------------------------------------------------------------------------------


class RewardedSubtaskEnv(SubtaskEnv):
    """A subtask with a reward of its own: 0.25 for any answer."""

    def env_step(self, action: str) -> StepOutcome:
        outcome = super().env_step(action)
        return attrs.evolve(outcome, reward=0.25)


def format_parser(text: str) -> ParseResult:
    return ParseResult(action=text.strip(), reward=0.1)


@pytest.mark.parametrize(
    ("mode", "child_reward", "grandchild_reward"),
    [
        # root return 1.0; child own 0.25 and parser +0.1; grandchild own 0.25 and parser +0.1
        ("parent", 1.0 + 0.1, (1.0 + 0.1) + 0.1),
        ("own", 0.25 + 0.1, 0.25 + 0.1),
        ("sum", 0.25 + 0.1 + 1.0, 0.25 + 0.1 + (0.25 + 0.1 + 1.0)),
    ],
)
async def test_child_reward_modes(mode: str, child_reward: float, grandchild_reward: float) -> None:
    protocol = DelegatingProtocol(
        chain_agent(),
        child_agent_factory=lambda: chain_agent(parser=format_parser),
        child_env_factory=RewardedSubtaskEnv.from_arguments,
        settings=DelegationSettings(child_reward=mode),  # type: ignore[arg-type]
    )
    root, child, grandchild = await run_protocol(protocol, ExactAnswerEnv("chain:2:7", "7"))
    assert root.total_reward == 1.0
    assert child.total_reward == pytest.approx(child_reward)
    assert grandchild.total_reward == pytest.approx(grandchild_reward)
    final = child.env_steps[-1]
    assert final.info["child_env_reward"] == 0.25 and final.info["parent_return"] == 1.0
    assert final.info["child_reward"] == mode and final.reward_components["parser"] == pytest.approx(0.1)
    assert ("env" in final.reward_components) == (mode != "parent")
    assert ("parent" in final.reward_components) == (mode != "own")
    assert child.meta["parent_return"] == 1.0 and child.meta["child_reward_step_index"] == final.index
    assert grandchild.meta["parent_return"] == pytest.approx(child_reward)


async def test_default_child_reward_is_the_parent_outcome() -> None:
    protocol = DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent)
    wrong = await run_protocol(protocol, ExactAnswerEnv("chain:1:7", "8"))
    assert [r.total_reward for r in wrong] == [0.0, 0.0]
    protocol = DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent)
    right = await run_protocol(protocol, ExactAnswerEnv("chain:1:7", "7", reward=2.0))
    assert [r.total_reward for r in right] == [2.0, 2.0]
    assert right[1].env_steps[-1].info["child_env_reward"] == 0.0


# -- limits -------------------------------------------------------------------------------------------


async def test_a_delegate_call_past_max_depth_gets_an_error_result() -> None:
    # chain:3 asks for a great-grandchild; the default max_depth is 2.
    protocol = DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent)
    rollouts = await run_protocol(protocol, ExactAnswerEnv("chain:3:7", "7"))
    assert [r.meta["delegation_depth"] for r in rollouts] == [0, 1, 2]
    grandchild = rollouts[2]
    [refused] = external_steps(grandchild)
    assert refused.tool_results is not None
    assert refused.tool_results[0].content.startswith("Error: delegation depth limit 2 reached")
    assert grandchild.meta["delegation_errors"][0]["error"].startswith("delegation depth limit 2")
    assert all(r.failure is None for r in rollouts) and rollouts[0].total_reward == 0.0

    protocol = DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent, settings={"max_depth": 1})
    root, child = await run_protocol(protocol, ExactAnswerEnv("chain:2:7", "7"))
    assert child.meta["delegation_errors"][0]["error"].startswith("delegation depth limit 1")
    assert root.failure is None and child.failure is None


class FanOutAgent(ScriptedAgent):
    """Turns a reply ``FANOUT <task> <task> ...`` into one external act with a delegate call per task."""

    async def act(self, options: ActOptions = DEFAULT_ACT_OPTIONS) -> AgentActResult:
        result = await super().act(options)
        step = result.final_step
        if not step.action.startswith("FANOUT "):
            return result
        tasks = step.action.split()[1:]
        calls = [
            ToolCall(id=f"fan_{i}", name="delegate", arguments=json.dumps({"task": t}))
            for i, t in enumerate(tasks)
        ]
        return AgentActResult(
            steps=[attrs.evolve(step, action_target="external", parse_result=None, tool_calls=calls)]
        )


def fan_out_parent(tasks: Sequence[str]) -> FanOutAgent:
    def policy(request: TokenCompletionRequest, _call_index: int) -> str:
        assert request.prompt_text is not None
        role, _ = last_message(request.prompt_text)
        return "done" if role == "tool" else "FANOUT " + " ".join(tasks)

    return FanOutAgent(ScriptedChatClient(policy))


class InFlightCounter:
    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def child_factory(self, latency_s: float = 0.02) -> ScriptedAgent:
        counter = self

        class CountingClient(ScriptedChatClient):
            async def complete_tokens(self, request: TokenCompletionRequest) -> Any:
                counter.now += 1
                counter.peak = max(counter.peak, counter.now)
                try:
                    await asyncio.sleep(latency_s)
                    return await super().complete_tokens(request)
                finally:
                    counter.now -= 1

        return ScriptedAgent(CountingClient(chain_policy), external_tools=("delegate",))


async def test_sibling_children_run_concurrently_within_max_concurrent_children() -> None:
    counter = InFlightCounter()
    tasks = [f"chain:0:{n}" for n in range(6)]
    protocol = DelegatingProtocol(
        fan_out_parent(tasks),
        child_agent_factory=counter.child_factory,
        settings=DelegationSettings(max_concurrent_children=2),
    )
    root, *children = await run_protocol(protocol, ExactAnswerEnv("go", "done"))
    assert counter.peak == 2  # concurrent, and never more than the bound
    [call] = external_steps(root)
    assert call.tool_results is not None
    assert [r.content for r in call.tool_results] == [str(n) for n in range(6)]  # in call order
    assert [c.meta["delegate_call_id"] for c in children] == [f"fan_{n}" for n in range(6)]
    assert [c.meta["delegation_path"] for c in children] == [str(n) for n in range(6)]
    assert root.meta["child_rollout_ids"] == [c.id for c in children]


async def test_max_children_bounds_the_whole_episode() -> None:
    counter = InFlightCounter()
    protocol = DelegatingProtocol(
        fan_out_parent([f"chain:0:{n}" for n in range(5)]),
        child_agent_factory=counter.child_factory,
        settings=DelegationSettings(max_children=3),
    )
    root, *children = await run_protocol(protocol, ExactAnswerEnv("go", "done"))
    assert len(children) == 3
    [call] = external_steps(root)
    assert call.tool_results is not None
    contents = [r.content for r in call.tool_results]
    assert contents[:3] == ["0", "1", "2"]
    assert all("max_children=3" in c and c.startswith("Error: ") for c in contents[3:])
    assert [e["call_id"] for e in root.meta["delegation_errors"]] == ["fan_3", "fan_4"]


async def test_arguments_without_a_task_get_an_error_result() -> None:
    parent = ScriptedAgent(
        ScriptedChatClient(['CALL delegate {"subject": "x"}', "gave up"]), external_tools=("delegate",)
    )
    protocol = DelegatingProtocol(parent, child_agent_factory=chain_agent)
    [root] = await run_protocol(protocol, ExactAnswerEnv("q", "gave up"))
    [call] = external_steps(root)
    assert call.tool_results is not None
    assert call.tool_results[0].content.startswith("Error: could not start the subtask: ConfigError")
    assert "'task'" in call.tool_results[0].content and root.failure is None and root.total_reward == 1.0


# -- failures -----------------------------------------------------------------------------------------


class BrokenClient(ScriptedChatClient):
    async def complete_tokens(self, request: TokenCompletionRequest) -> Any:
        raise TransportError("inference server unreachable")


async def test_a_failing_child_is_reported_on_its_rollout_and_to_the_parent() -> None:
    protocol = DelegatingProtocol(
        chain_agent(), child_agent_factory=lambda: ScriptedAgent(BrokenClient(["x"]))
    )
    root, child = await run_protocol(protocol, ExactAnswerEnv("chain:1:7", "7"))
    assert child.failure is not None and child.failure.stage == "client"
    assert child.meta["ended_by"] == "failure" and child.meta["parent_rollout_id"] == root.id
    [call] = external_steps(root)
    assert call.tool_results is not None
    assert call.tool_results[0].content == (
        "Error: the sub-agent failed (client: TransportError: inference server unreachable)"
    )
    # The parent's episode went on and ended normally (it passed the error text on as its answer).
    assert root.failure is None and root.meta["ended_by"] == "env_terminated" and root.total_reward == 0.0


async def test_a_child_past_child_timeout_s_is_kept_with_its_finished_children() -> None:
    """The child delegates (its grandchild finishes), then its next model call hangs."""

    class HangsOnToolResult(ScriptedChatClient):
        async def complete_tokens(self, request: TokenCompletionRequest) -> Any:
            assert request.prompt_text is not None
            if last_message(request.prompt_text)[0] == "tool":
                await asyncio.sleep(30)
            return await super().complete_tokens(request)

    def child_factory() -> ScriptedAgent:
        return ScriptedAgent(HangsOnToolResult(chain_policy), external_tools=("delegate",))

    protocol = DelegatingProtocol(
        chain_agent(), child_agent_factory=child_factory, settings=DelegationSettings(child_timeout_s=0.2)
    )
    root, child, grandchild = await run_protocol(protocol, ExactAnswerEnv("chain:2:7", "7"))
    assert child.failure is not None and child.failure.stage == "timeout"
    assert "child_timeout_s=0.2" in child.failure.message and child.steps == []
    assert child.meta["child_rollout_ids"] == [grandchild.id]
    assert grandchild.failure is None and grandchild.meta["parent_rollout_id"] == child.id
    assert [s.parsed_action for s in grandchild.env_steps] == ["7"]
    [call] = external_steps(root)
    assert call.tool_results is not None and call.tool_results[0].content.startswith(
        "Error: the sub-agent failed (timeout: LudicTimeoutError"
    )
    assert root.failure is None


async def test_a_child_without_an_answer_reports_it() -> None:
    def no_answer() -> ScriptedAgent:
        return ScriptedAgent(ScriptedChatClient([""], cycle=True))

    protocol = DelegatingProtocol(
        chain_agent(), child_agent_factory=no_answer, settings=DelegationSettings(child_max_steps=2)
    )
    root, child = await run_protocol(protocol, ExactAnswerEnv("chain:1:7", "7"))
    assert len(child.agent_steps) == 2 and child.truncation_reason == "max_steps"
    [call] = external_steps(root)
    assert call.tool_results is not None
    assert (
        call.tool_results[0].content == "Error: the sub-agent ended without an answer (ended_by='max_steps')"
    )
    # The parent's outcome still reaches the child's last counted step (its last parse failure).
    assert child.meta["child_reward_step_index"] == 1 and child.total_reward == -2.0 + 0.0


async def test_other_external_tools_go_to_the_handler_or_fail_naming_the_tool() -> None:
    def parent_policy(request: TokenCompletionRequest, _call_index: int) -> str:
        assert request.prompt_text is not None
        role, content = last_message(request.prompt_text)
        return content if role == "tool" else 'CALL lookup {"key": "k"}'

    seen: list[str] = []

    def handler(calls: Sequence[ToolCall]) -> list[ToolResult]:
        seen.extend(c.name for c in calls)
        return [ToolResult(tool_call_id=c.id, tool_name=c.name, content="v") for c in calls]

    def parent() -> ScriptedAgent:
        return ScriptedAgent(ScriptedChatClient(parent_policy), external_tools=("lookup",))

    protocol = DelegatingProtocol(parent(), child_agent_factory=chain_agent, external_tool_handler=handler)
    [root] = await run_protocol(protocol, ExactAnswerEnv("q", "v"))
    assert seen == ["lookup"] and root.total_reward == 1.0

    protocol = DelegatingProtocol(parent(), child_agent_factory=chain_agent)
    [root] = await run_protocol(protocol, ExactAnswerEnv("q", "v"))
    assert root.failure is not None and root.failure.stage == "tool"
    assert "['lookup']" in root.failure.message and "external_tool_handler" in root.failure.message


async def test_options_are_checked() -> None:
    with pytest.raises(
        ConfigError,
        match=r"DelegationSettings\.child_reward must be one of 'parent', 'own', 'sum', got 'all'",
    ):
        DelegationSettings(child_reward="all")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"DelegationSettings\.max_depth must be an int >= 1, got 0"):
        DelegationSettings(max_depth=0)
    with pytest.raises(
        ConfigError, match=r"DelegationSettings\.child_timeout_s must be a finite number > 0, got inf"
    ):
        DelegationSettings(child_timeout_s=float("inf"))
    with pytest.raises(
        ConfigError, match=r"DelegationSettings\.delegate_tool must be a non-empty str, got ''"
    ):
        DelegationSettings(delegate_tool="")
    with pytest.raises(ConfigError, match="unknown key 'depth'; did you mean 'max_depth'"):
        DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent, settings={"depth": 1})
    with pytest.raises(ConfigError, match="max_children = '3': expected int"):
        DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent, settings={"max_children": "3"})
    with pytest.raises(ConfigError, match="settings must be a DelegationSettings or a mapping of its fields"):
        DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent, settings=2)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="child_agent_factory is an agent instance"):
        DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="child_env_factory must be None or a callable"):
        DelegatingProtocol(chain_agent(), child_agent_factory=chain_agent, child_env_factory=SubtaskEnv("q"))  # type: ignore[arg-type]

    protocol = DelegatingProtocol(chain_agent(), child_agent_factory=lambda: "not an agent")  # type: ignore[arg-type,return-value]
    [root] = await run_protocol(protocol, ExactAnswerEnv("chain:1:7", "7"))
    assert root.failure is not None and root.failure.stage == "tool"
    assert "child_agent_factory() returned str" in root.failure.message


# -- by name, through the engine, into SAW items --------------------------------------------------------


def test_registered_as_delegating_with_checked_kwargs() -> None:
    assert "delegating" in PROTOCOLS.names()
    # A spec's JSON kwargs give the settings as a mapping, structured into DelegationSettings.
    protocol = make_protocol(
        "delegating", agent_factory=chain_agent, child_agent_factory=chain_agent, settings={"max_depth": 1}
    )
    assert isinstance(protocol, DelegatingProtocol)
    assert protocol.settings == DelegationSettings(max_depth=1)
    factory = PROTOCOLS.get("delegating")
    with pytest.raises(ConfigError, match="needs kwarg 'child_agent_factory'"):
        factory.check_kwargs({"agent_factory": chain_agent})
    with pytest.raises(ConfigError, match="child_agent_factory is an agent instance"):
        factory.check_kwargs({"agent_factory": chain_agent, "child_agent_factory": chain_agent()})
    with pytest.raises(ConfigError, match="unknown kwargs \\['depth'\\]"):
        factory.check_kwargs({"agent_factory": chain_agent, "child_agent_factory": chain_agent, "depth": 1})
    with pytest.raises(ConfigError, match="unknown key 'child_reward_mode'"):
        factory.check_kwargs(
            {
                "agent_factory": chain_agent,
                "child_agent_factory": chain_agent,
                "settings": {"child_reward_mode": "own"},
            }
        )


async def test_engine_runs_delegating_specs_and_group_credit_keeps_parents_and_children_apart() -> None:
    def env_factory(expected: str) -> ExactAnswerEnv:
        return ExactAnswerEnv("chain:1:7", expected)

    spec = ProtocolSpec("delegating", {"agent_factory": chain_agent, "child_agent_factory": chain_agent})
    # Group g0: one right and one wrong parent; group g1: two right ones.
    requests = [
        RolloutRequest(
            env=EnvSpec("answer", {"expected": expected}),
            protocol=spec,
            meta={"group_id": group},
            inference=InferenceSpec(),
        )
        for group, expected in (("g0", "7"), ("g0", "8"), ("g1", "7"), ("g1", "7"))
    ]
    engine = RolloutEngine(env_factories={"answer": env_factory})
    result = await engine.generate_rollouts(requests, RolloutSettings(max_steps=3))
    assert not result.failed_episodes and len(result.rollouts) == 8
    keys = [group_key(r) for r in result.rollouts]
    assert keys == [
        ("g0", "agent_0"),
        ("g0", "child@0"),
        ("g0", "agent_0"),
        ("g0", "child@0"),
        ("g1", "agent_0"),
        ("g1", "child@0"),
        ("g1", "agent_0"),
        ("g1", "child@0"),
    ]

    batch = await engine.generate_batch(
        requests, RolloutSettings(max_steps=3), credit_assigner=GroupNormalizedReturn(group_size=2)
    )
    weights: dict[tuple[str, str], list[float]] = {}
    for item in batch.items:
        weights.setdefault((item.meta["group_id"], item.meta["agent_id"]), []).append(item.weight)
    # One item per turn (every agent here has one turn); children carry their parent's outcome.
    assert weights == {
        ("g0", "agent_0"): [0.5, -0.5],
        ("g0", "child@0"): [0.5, -0.5],
        ("g1", "agent_0"): [0.0, 0.0],
        ("g1", "child@0"): [0.0, 0.0],
    }
    child_items = [i for i in batch.items if i.meta["delegation_role"] == "child"]
    assert all(i.meta["delegation_depth"] == 1 and i.meta["parent_turn_index"] == 0 for i in child_items)
    parent_ids = {i.meta["rollout_id"] for i in batch.items if i.meta["delegation_role"] == "root"}
    assert {i.meta["parent_rollout_id"] for i in child_items} == parent_ids


async def test_a_failed_child_fails_its_episode_in_the_engine() -> None:
    spec = ProtocolSpec(
        "delegating",
        {"agent_factory": chain_agent, "child_agent_factory": lambda: ScriptedAgent(BrokenClient(["x"]))},
    )
    engine = RolloutEngine(env_factories={"answer": ExactAnswerEnv})
    result = await engine.generate_rollouts(
        [RolloutRequest(env=EnvSpec("answer"), protocol=spec)],
        RolloutSettings(max_steps=3, on_failure="continue", max_failure_rate=1.0),
    )
    [episode] = result.episodes
    assert episode.failure is not None and episode.failure.stage == "client"
    root, child = episode.rollouts
    assert root.failure is None and child.failure is not None  # both kept, the failure on the child
    assert child.steps == [] and root.env_steps[-1].info["correct"] is False
