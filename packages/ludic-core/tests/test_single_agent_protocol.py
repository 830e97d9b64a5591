from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import attrs
import pytest

from ludic_core.errors import ConfigError
from ludic_core.inference import InferenceSpec, SamplingParams, TokenCompletionRequest
from ludic_core.parsing import ParseResult
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.testing import ByteTokenizer, GuessNumberEnv, ScriptedAgent, ScriptedChatClient
from ludic_core.types import AgentStep, ChatResponse, EnvironmentStep, StepOutcome, ToolCall, ToolResult

SECRET_SEED = 3  # GuessNumberEnv(max_number=10) with seed 3 hides 4


def secret_for(seed: int, max_number: int = 10) -> int:
    env = GuessNumberEnv(max_number=max_number)
    env.reset(seed=seed)
    return env.secret


def tagged_parser(text: str) -> ParseResult:
    """<n>…</n> with a +0.1 format reward, -1.0 and feedback otherwise."""
    text = text.strip()
    if text.startswith("<n>") and text.endswith("</n>"):
        return ParseResult(action=text[3:-4], reward=0.1)
    return ParseResult(action=None, reward=-1.0, obs="Use <n>NUMBER</n>.")


class CountingEnv(GuessNumberEnv):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.step_actions: list[str] = []

    def env_step(self, action: str) -> StepOutcome:
        self.step_actions.append(action)
        return super().env_step(action)


async def run(agent: ScriptedAgent, env: GuessNumberEnv, max_steps: int = 10, **kw: object):
    protocol = SingleAgentProtocol(agent, **kw)  # type: ignore[arg-type]
    [rollout] = await protocol.run(env=env, max_steps=max_steps, env_seed=SECRET_SEED, sampling_seed=7)
    return rollout


async def test_parse_failure_skips_env_and_feeds_back_synthetic_obs() -> None:
    secret = secret_for(SECRET_SEED)
    client = ScriptedChatClient(["garbage", f"<n>{secret}</n>"])
    agent = ScriptedAgent(client, parser=tagged_parser)
    env = CountingEnv()
    rollout = await run(agent, env)

    assert env.step_actions == [str(secret)]  # the garbage never reached env.step
    fail, ok, env_step = rollout.steps
    assert isinstance(fail, AgentStep) and fail.parse_error and fail.reward == -1.0
    assert fail.reward_components == {"parser": -1.0}
    assert fail.info["parse_feedback_obs"] == "Use <n>NUMBER</n>."
    # The feedback is the next observation the model sees.
    assert agent.messages[3] == {"role": "user", "content": "Use <n>NUMBER</n>."}
    assert isinstance(ok, AgentStep) and not ok.parse_error and ok.reward == 0.0
    # A successful parser reward moves onto the env step, counted once.
    assert isinstance(env_step, EnvironmentStep)
    assert env_step.reward == pytest.approx(1.1)
    assert env_step.reward_components == {"env": 1.0, "parser": 0.1}
    assert rollout.total_reward == pytest.approx(-1.0 + 1.1)
    assert rollout.total_reward == pytest.approx(sum(s.reward for s in rollout.steps))
    # A new turn after the parse failure; the env step shares the successful call's turn.
    assert fail.turn_id != ok.turn_id == env_step.turn_id
    assert env_step.agent_step_ids == (ok.id,)
    assert env_step.source_agent_step_id == ok.id
    assert env_step.trace == ok.trace
    assert env_step.prev_obs == "Use <n>NUMBER</n>."
    assert env_step.next_obs is None and env_step.terminated
    assert rollout.meta["ended_by"] == "env_terminated" and rollout.meta["episode_truncated"] is False


async def test_new_turn_after_every_env_step_and_prev_obs_chain() -> None:
    secret = secret_for(SECRET_SEED)
    wrong = 1 if secret != 1 else 2
    client = ScriptedChatClient([str(wrong), str(wrong), str(secret)])
    rollout = await run(ScriptedAgent(client), GuessNumberEnv())
    env_steps = rollout.env_steps
    assert len(env_steps) == 3
    assert len({s.turn_id for s in env_steps}) == 3
    assert env_steps[0].prev_obs == "Guess a number between 1 and 10."
    assert env_steps[1].prev_obs == env_steps[0].next_obs
    assert [s.index for s in rollout.steps] == list(range(6))


async def test_stop_on_parse_error_ends_episode_with_terminated_agent_step() -> None:
    client = ScriptedChatClient(["garbage", "<n>1</n>"])
    env = CountingEnv()
    rollout = await run(ScriptedAgent(client, parser=tagged_parser), env, stop_on_parse_error=True)
    assert env.step_actions == []
    [step] = rollout.steps
    assert isinstance(step, AgentStep) and step.parse_error and step.terminated and not step.truncated
    assert rollout.meta["ended_by"] == "parse_error"
    assert rollout.total_reward == -1.0
    assert client.calls == 1


async def test_max_steps_marks_last_env_step_truncated() -> None:
    secret = secret_for(SECRET_SEED)
    wrong = 1 if secret != 1 else 2
    rollout = await run(
        ScriptedAgent(ScriptedChatClient([str(wrong)], cycle=True)), GuessNumberEnv(), max_steps=3
    )
    last = rollout.steps[-1]
    assert isinstance(last, EnvironmentStep)
    assert last.truncated and last.truncation_reason == "max_steps" and last.next_obs is None
    assert last.info["truncation_reason"] == "max_steps"
    assert rollout.meta["episode_truncated"] is True and rollout.meta["truncation_reason"] == "max_steps"
    assert not any(s.truncated for s in rollout.steps[:-1])


async def test_max_steps_with_only_parse_failures_marks_last_agent_step() -> None:
    client = ScriptedChatClient(["bad"], cycle=True)
    rollout = await run(ScriptedAgent(client, parser=tagged_parser), GuessNumberEnv(), max_steps=2)
    assert len(rollout.steps) == 2 and all(isinstance(s, AgentStep) for s in rollout.steps)
    assert rollout.steps[-1].truncated and rollout.steps[-1].truncation_reason == "max_steps"
    assert not rollout.steps[0].truncated
    assert rollout.truncation_reason == "max_steps"
    assert rollout.total_reward == -2.0


async def test_env_truncation_reason_is_env() -> None:
    client = ScriptedChatClient(["x"], cycle=True)
    rollout = await run(ScriptedAgent(client), GuessNumberEnv(max_guesses=2), max_steps=10)
    last = rollout.steps[-1]
    assert isinstance(last, EnvironmentStep) and last.truncated and last.truncation_reason == "env"
    assert rollout.meta["truncation_reason"] == "env" and rollout.meta["ended_by"] == "env_truncated"
    assert client.calls == 2


async def test_incomplete_completion_is_a_parse_failure() -> None:
    client = ScriptedChatClient(["123456789", "4"])
    spec = InferenceSpec(sampling=SamplingParams(max_tokens=3))
    env = CountingEnv()
    rollout = await run(ScriptedAgent(client, inference=spec), env, max_steps=2)
    first = rollout.steps[0]
    assert isinstance(first, AgentStep) and first.parse_error and first.trace.finish_reason == "length"
    assert first.info["incomplete_completion"] is True and first.reward == pytest.approx(-0.1)
    assert env.step_actions == ["4"]


@pytest.mark.parametrize(
    ("agent_prompt", "expected"),
    [("Agent default prompt.", "Agent default prompt."), (None, GuessNumberEnv().suggested_sysprompt)],
)
async def test_system_prompt_precedence(agent_prompt: str | None, expected: str) -> None:
    agent = ScriptedAgent(ScriptedChatClient(["1"], cycle=True), system_prompt=agent_prompt)
    await run(agent, GuessNumberEnv(), max_steps=1)
    assert agent.messages[0] == {"role": "system", "content": expected}


async def test_external_tool_calls_go_to_handler_within_the_same_turn() -> None:
    secret = secret_for(SECRET_SEED)
    seen: list[Sequence[ToolCall]] = []

    async def handler(calls: Sequence[ToolCall]) -> list[ToolResult]:
        seen.append(calls)
        return [ToolResult(tool_call_id=c.id, tool_name=c.name, content=f"hint: {secret}") for c in calls]

    client = ScriptedChatClient(['CALL peek {"what": "secret"}', str(secret)])
    agent = ScriptedAgent(client, external_tools={"peek"})
    rollout = await run(agent, GuessNumberEnv(), external_tool_handler=handler)
    ext, final, env_step = rollout.steps
    assert isinstance(ext, AgentStep) and ext.action_target == "external"
    assert ext.tool_calls is not None and ext.tool_calls[0].name == "peek"
    assert json.loads(ext.tool_calls[0].arguments) == {"what": "secret"}
    assert ext.tool_results == (
        ToolResult(tool_call_id=ext.tool_calls[0].id, tool_name="peek", content=f"hint: {secret}"),
    )
    assert len(seen) == 1
    assert ext.turn_id == final.turn_id == env_step.turn_id
    assert isinstance(env_step, EnvironmentStep) and env_step.agent_step_ids == (ext.id, final.id)
    assert agent.messages[-2]["role"] == "tool"
    # The second prompt extends the first prompt + completion token for token (append-only template).
    assert final.trace.prompt_token_ids[: len(ext.trace.prompt_token_ids)] == ext.trace.prompt_token_ids
    prefix = ext.trace.prompt_token_ids + ext.trace.completion_token_ids
    assert final.trace.prompt_token_ids[: len(prefix)] == prefix
    assert rollout.total_reward == 1.0


async def test_sync_external_handler_is_supported() -> None:
    def handler(calls: Sequence[ToolCall]) -> list[ToolResult]:
        return [ToolResult(tool_call_id=c.id, tool_name=c.name, content="ok") for c in calls]

    client = ScriptedChatClient(["CALL ping {}", str(secret_for(SECRET_SEED))])
    rollout = await run(
        ScriptedAgent(client, external_tools={"ping"}), GuessNumberEnv(), external_tool_handler=handler
    )
    assert rollout.failure is None and rollout.env_steps


async def test_external_call_without_handler_is_a_reported_failure() -> None:
    client = ScriptedChatClient(["CALL ping {}"])
    rollout = await run(ScriptedAgent(client, external_tools={"ping"}), GuessNumberEnv())
    assert rollout.failure is not None and rollout.failure.stage == "protocol"
    assert "external_tool_handler" in rollout.failure.message
    assert rollout.meta["ended_by"] == "failure"
    assert len(rollout.steps) == 1  # what was recorded before the failure is kept


async def test_handler_missing_results_is_a_tool_failure() -> None:
    client = ScriptedChatClient(["CALL ping {}"])
    rollout = await run(
        ScriptedAgent(client, external_tools={"ping"}),
        GuessNumberEnv(),
        external_tool_handler=lambda calls: [],
    )
    assert rollout.failure is not None and rollout.failure.stage == "tool"


class ExplodingEnv(GuessNumberEnv):
    def env_step(self, action: str) -> StepOutcome:
        raise RuntimeError("env blew up")


async def test_env_exception_is_reported_as_failed_episode() -> None:
    rollout = await run(ScriptedAgent(ScriptedChatClient(["1"])), ExplodingEnv())
    assert rollout.failure is not None
    assert rollout.failure.stage == "env" and rollout.failure.error_type == "RuntimeError"
    assert "env blew up" in rollout.failure.message and "Traceback" in rollout.failure.traceback
    assert rollout.failed


async def test_client_exception_is_reported_as_agent_failure() -> None:
    def explode(request: TokenCompletionRequest, i: int) -> str:
        raise ValueError("model exploded")

    rollout = await run(ScriptedAgent(ScriptedChatClient(explode)), GuessNumberEnv())
    assert rollout.failure is not None and rollout.failure.stage == "agent"
    assert rollout.failure.error_type == "ValueError"


async def test_model_call_timeout_is_reported_not_hung() -> None:
    client = ScriptedChatClient(["1"], latency_s=5.0)
    protocol = SingleAgentProtocol(ScriptedAgent(client))
    [rollout] = await asyncio.wait_for(
        protocol.run(env=GuessNumberEnv(), max_steps=3, env_seed=0, timeout_s=0.05), timeout=2.0
    )
    assert rollout.failure is not None and rollout.failure.stage == "timeout"


async def test_sampling_seeds_differ_per_turn_and_are_reproducible() -> None:
    async def seeds() -> list[int | None]:
        client = ScriptedChatClient(["x"], cycle=True)
        await run(ScriptedAgent(client), GuessNumberEnv(), max_steps=4)
        return [r.seed for r in client.requests]

    first = await seeds()
    assert len(set(first)) == 4 and all(s is not None for s in first)
    assert first == await seeds()


async def test_traces_record_the_temperature_the_calls_sampled_with() -> None:
    secret = secret_for(SECRET_SEED)
    spec = InferenceSpec(sampling=SamplingParams(temperature=0.6))

    class SilentClient(ScriptedChatClient):
        """Reports no temperature (breaking the ChatClient contract): the protocol does not guess one."""

        async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
            return attrs.evolve(await super().complete_tokens(request), sampling_temperature=None)

    class ReportingClient(ScriptedChatClient):
        async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
            return attrs.evolve(await super().complete_tokens(request), sampling_temperature=1.0)

    async def temperatures(client: ScriptedChatClient, inference: InferenceSpec | None) -> list[float | None]:
        protocol = SingleAgentProtocol(ScriptedAgent(client, parser=tagged_parser))
        [rollout] = await protocol.run(
            env=GuessNumberEnv(), max_steps=5, env_seed=SECRET_SEED, inference=inference
        )
        return [s.trace.sampling_temperature for s in rollout.steps]

    # What the client reported, on every step (the env step's trace too); nothing filled in.
    assert await temperatures(ScriptedChatClient(["garbage", f"<n>{secret}</n>"]), spec) == [0.6, 0.6, 0.6]
    assert await temperatures(SilentClient(["garbage", f"<n>{secret}</n>"]), spec) == [None, None, None]
    assert set(await temperatures(ReportingClient([f"<n>{secret}</n>"]), spec)) == {1.0}
    own = InferenceSpec().sampling.temperature
    assert set(await temperatures(ScriptedChatClient([f"<n>{secret}</n>"]), None)) == {own}


async def test_the_conformance_check_fails_a_client_that_does_not_report_its_temperature() -> None:
    from ludic_core.errors import ConformanceError
    from ludic_core.testing import check_client

    class SilentClient(ScriptedChatClient):
        async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
            return attrs.evolve(await super().complete_tokens(request), sampling_temperature=None)

    with pytest.raises(ConformanceError, match=r"sampling_temperature None, but the request sampled at 1\.0"):
        await check_client(SilentClient(["a", "b", "c", "d"]), prompt_token_ids=[1, 2, 3])


async def test_env_with_two_agents_is_rejected() -> None:
    from core_test_envs import RaceToTenEnv

    with pytest.raises(ConfigError, match="exactly one agent"):
        await SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["1"]))).run(
            env=RaceToTenEnv(), max_steps=1
        )


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
async def test_max_steps_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_steps"):
        await SingleAgentProtocol(ScriptedAgent(ScriptedChatClient(["1"]))).run(
            env=GuessNumberEnv(),
            max_steps=bad,  # type: ignore[arg-type]
        )


async def test_byte_tokenizer_prompts_are_real_token_ids() -> None:
    client = ScriptedChatClient(["7"])
    await run(ScriptedAgent(client), GuessNumberEnv(), max_steps=1)
    request = client.requests[0]
    assert ByteTokenizer().decode(request.prompt_token_ids) == request.prompt_text


async def test_protocol_awaits_async_env_step() -> None:
    class AsyncGuess(GuessNumberEnv):
        def __init__(self) -> None:
            super().__init__()
            self.async_steps = 0

        async def aenv_step(self, action: str) -> StepOutcome:
            self.async_steps += 1
            await asyncio.sleep(0)
            return self.env_step(action)

    env = AsyncGuess()
    rollout = await run(ScriptedAgent(ScriptedChatClient(["1", "2", "3"])), env, max_steps=3)
    assert env.async_steps == len(rollout.env_steps) == 3


class GoesQuietEnv(GuessNumberEnv):
    """Stops listing its agent as active after ``quiet_after`` guesses without ending the episode."""

    def __init__(self, quiet_after: int) -> None:
        super().__init__()
        self.quiet_after = quiet_after

    @property
    def active_agents(self) -> list[str]:
        return [] if self.guesses >= self.quiet_after else [self.agent_id]


@pytest.mark.parametrize("slack", [0, 3])
async def test_env_going_quiet_on_the_last_allowed_step_is_not_a_max_steps_truncation(slack: int) -> None:
    wrong = 1 if secret_for(SECRET_SEED) != 1 else 2
    agent = ScriptedAgent(ScriptedChatClient([str(wrong)], cycle=True))
    rollout = await run(agent, GoesQuietEnv(quiet_after=2), max_steps=2 + slack)
    last = rollout.steps[-1]
    assert len(rollout.env_steps) == 2
    assert last.truncated and last.truncation_reason == "env" and last.info["truncation_reason"] == "env"
    assert rollout.meta["truncation_reason"] == "env" and rollout.meta["ended_by"] == "inactive"


async def test_a_parsed_action_that_is_no_str_fails_the_episode_in_the_env_stage() -> None:
    # The protocol steps a default SingleAgentEnv through env_step directly; the action check the
    # skipped env.step makes must still refuse a parser's non-str action, with env.step's message.
    def number_parser(text: str) -> ParseResult:
        return ParseResult(action=int(text))  # type: ignore[arg-type]

    env = CountingEnv()
    rollout = await run(ScriptedAgent(ScriptedChatClient(["3"]), parser=number_parser), env)
    assert env.step_actions == []
    assert rollout.failure is not None and rollout.failure.stage == "env"
    assert rollout.failure.error_type == "ProtocolError"
    assert "the action for 'agent_0' must be a str" in rollout.failure.message
