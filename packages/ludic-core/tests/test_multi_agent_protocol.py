from __future__ import annotations

from collections.abc import Sequence

import pytest
from core_test_envs import MatchingPenniesEnv, RaceToTenEnv

from ludic_core.errors import ConfigError
from ludic_core.parsing import ParseResult
from ludic_core.protocols import MultiAgentProtocol
from ludic_core.testing import ScriptedAgent, ScriptedChatClient
from ludic_core.types import AgentStep, Rollout, ToolCall, ToolResult


def by_agent(rollouts: list[Rollout]) -> dict[str, Rollout]:
    return {r.meta["agent_id"]: r for r in rollouts}


def agent(responses: list[str], **kw: object) -> ScriptedAgent:
    return ScriptedAgent(ScriptedChatClient(responses, cycle=True), **kw)  # type: ignore[arg-type]


async def test_turn_based_alternation_and_loser_gets_terminal_reward() -> None:
    # a: 2,2,2 -> 2,4,6 ... b: 1,1 -> counts 2,3,5,6,8,9,(a)11 → a wins on its 4th move.
    a, b = agent(["2"]), agent(["1"])
    rollouts = by_agent(
        await MultiAgentProtocol({"a": a, "b": b}).run(env=RaceToTenEnv(), max_steps=20, env_seed=0)
    )
    ra, rb = rollouts["a"], rollouts["b"]
    assert [s.parsed_action for s in ra.env_steps] == ["2"] * 4
    assert [s.parsed_action for s in rb.env_steps] == ["1"] * 3
    assert ra.env_steps[-1].terminated and ra.total_reward == 1.0
    # b never moved last; its last decision absorbs the loss and ends its episode.
    last_b = rb.env_steps[-1]
    assert last_b.terminated and last_b.next_obs is None
    assert last_b.reward == -1.0 and last_b.reward_components["after_turn"] == -1.0
    assert rb.total_reward == -1.0
    assert ra.meta["ended_by"] == rb.meta["ended_by"] == "env_terminated"
    # b saw a's moves as observations between its turns.
    assert {"role": "user", "content": "count=2, your move"} in b.messages
    # The env's suggested system prompt reaches agents without their own.
    assert a.messages[0]["content"] == "Add 1 or 2. Reach the target first."


async def test_env_rejected_move_keeps_turn_and_others_wait() -> None:
    a, b = agent(["7", "2"]), agent(["2"])
    rollouts = by_agent(
        await MultiAgentProtocol({"a": a, "b": b}).run(env=RaceToTenEnv(), max_steps=3, env_seed=0)
    )
    first = rollouts["a"].env_steps[0]
    assert first.parsed_action == "7" and first.reward == -0.1 and not first.terminated
    assert rollouts["a"].env_steps[1].parsed_action == "2"
    assert len(rollouts["b"].env_steps) == 1


def strict_coin(text: str) -> ParseResult:
    text = text.strip()
    return (
        ParseResult(action=text)
        if text in ("H", "T")
        else ParseResult(action=None, reward=-0.5, obs="H or T only.")
    )


async def test_simultaneous_moves_with_one_parse_failure() -> None:
    even = agent(["H"], parser=strict_coin)
    odd = ScriptedAgent(ScriptedChatClient(["banana", "T", "T", "T"]), parser=strict_coin)
    protocol = MultiAgentProtocol({"even": even, "odd": odd})
    rollouts = by_agent(await protocol.run(env=MatchingPenniesEnv(rounds=3), max_steps=10, env_seed=0))
    re, ro = rollouts["even"], rollouts["odd"]
    # odd's first output failed: no env action for it, feedback as its next obs, penalty on its agent step.
    first_odd = ro.steps[0]
    assert isinstance(first_odd, AgentStep) and first_odd.parse_error and first_odd.reward == -0.5
    assert odd.messages[2] == {"role": "user", "content": "H or T only."}
    # even acted alone that iteration: its move waited (env said so) and it was not asked again.
    assert re.env_steps[0].next_obs == "waiting for the other player"
    assert [s.parsed_action for s in ro.env_steps] == ["T", "T", "T"]
    assert re.total_reward == 0.0 and ro.total_reward == pytest.approx(3.0 - 0.5)
    assert re.meta["ended_by"] == ro.meta["ended_by"] == "env_terminated"


async def test_independent_termination() -> None:
    even, odd = agent(["H"]), agent(["H"])
    env = MatchingPenniesEnv(rounds=4, eliminate_odd_after=2)
    rollouts = by_agent(
        await MultiAgentProtocol({"even": even, "odd": odd}).run(env=env, max_steps=10, env_seed=0)
    )
    assert len(rollouts["odd"].env_steps) == 2 and rollouts["odd"].env_steps[-1].terminated
    assert len(rollouts["even"].env_steps) == 4 and rollouts["even"].env_steps[-1].terminated
    assert rollouts["even"].total_reward == pytest.approx(1 + 1 + 0.5 + 0.5)


async def test_max_steps_truncates_every_unfinished_agent() -> None:
    rollouts = by_agent(
        await MultiAgentProtocol({"a": agent(["1"]), "b": agent(["1"])}).run(env=RaceToTenEnv(), max_steps=3)
    )
    for r in rollouts.values():
        assert r.steps[-1].truncated and r.steps[-1].truncation_reason == "max_steps"
        assert r.meta["episode_truncated"] and r.meta["ended_by"] == "max_steps"


async def test_stop_on_parse_error_ends_episode_for_everyone() -> None:
    even = agent(["H"], parser=strict_coin)
    odd = agent(["nope"], parser=strict_coin)
    protocol = MultiAgentProtocol({"even": even, "odd": odd}, stop_on_parse_error=True)
    rollouts = by_agent(await protocol.run(env=MatchingPenniesEnv(), max_steps=10))
    failing = rollouts["odd"].steps[-1]
    assert isinstance(failing, AgentStep) and failing.terminated and failing.parse_error
    assert rollouts["odd"].meta["ended_by"] == "parse_error"
    # even's move of that same iteration never reached the env: the episode stopped first.
    even_last = rollouts["even"].steps[-1]
    assert isinstance(even_last, AgentStep) and even_last.truncated and even_last.truncation_reason == "env"
    assert not rollouts["even"].env_steps
    assert rollouts["even"].meta["ended_by"] == "peer_parse_error"


async def test_external_tools_per_agent_handlers() -> None:
    calls_seen: dict[str, int] = {"a": 0}

    def handler_a(calls: Sequence[ToolCall]) -> list[ToolResult]:
        calls_seen["a"] += 1
        return [ToolResult(tool_call_id=c.id, tool_name=c.name, content="count is low") for c in calls]

    a = ScriptedAgent(ScriptedChatClient(["CALL look {}", "2"], cycle=True), external_tools={"look"})
    b = agent(["2"])
    protocol = MultiAgentProtocol({"a": a, "b": b}, external_tool_handler={"a": handler_a})
    rollouts = by_agent(await protocol.run(env=RaceToTenEnv(), max_steps=4))
    ra = rollouts["a"]
    assert ra.failure is None and calls_seen["a"] == 2
    ext = ra.steps[0]
    assert isinstance(ext, AgentStep) and ext.action_target == "external" and ext.tool_results
    assert ra.env_steps[0].agent_step_ids == (ra.steps[0].id, ra.steps[1].id)


async def test_agent_failure_is_reported_on_every_rollout() -> None:
    def boom(request: object, i: int) -> str:
        raise RuntimeError("odd client down")

    odd = ScriptedAgent(ScriptedChatClient(boom))
    rollouts = await MultiAgentProtocol({"even": agent(["H"]), "odd": odd}).run(
        env=MatchingPenniesEnv(), max_steps=5
    )
    assert all(r.failure is not None and r.failure.stage == "agent" for r in rollouts)
    assert all("odd client down" in r.failure.message for r in rollouts if r.failure)


async def test_unknown_agent_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not agents of"):
        await MultiAgentProtocol({"zed": agent(["1"])}).run(env=RaceToTenEnv(), max_steps=2)


async def test_unmanaged_bot_moves_through_empty_step() -> None:
    # Only "a" is managed; "b" is a bot the env would need to move itself. RaceToTenEnv needs an
    # action from b, so the protocol cannot progress once b is to move: the episode ends for "a"
    # truncated with reason env instead of hanging.
    class BotRace(RaceToTenEnv):
        def step(self, actions):  # type: ignore[no-untyped-def]
            if self.turn == "b" and not actions:
                actions = {"b": "1"}
            return super().step(actions)

    rollouts = by_agent(await MultiAgentProtocol({"a": agent(["2"])}).run(env=BotRace(), max_steps=20))
    ra = rollouts["a"]
    assert ra.failure is None
    # a: 2, bot 1 → 3 per round; a reaches 10 on its 4th move (2,5,8,11).
    assert [s.parsed_action for s in ra.env_steps] == ["2"] * 4 and ra.total_reward == 1.0


class SilentLoserRace(RaceToTenEnv):
    """RaceToTenEnv whose winning move reports an outcome to the mover only: the other agent is simply
    no longer active, with no terminal outcome of its own."""

    def step(self, actions):  # type: ignore[no-untyped-def]
        mover = self.turn
        outcomes = super().step(actions)
        return {mover: outcomes[mover]} if self.done else outcomes


def end_labels(rollouts: list[Rollout]) -> dict[str, tuple[object, ...]]:
    """Every truncation/termination field of each agent's final step and rollout meta."""
    out: dict[str, tuple[object, ...]] = {}
    for rollout in rollouts:
        last = rollout.steps[-1] if rollout.steps else None
        out[rollout.meta["agent_id"]] = (
            len(rollout.steps),
            last and last.terminated,
            last and last.truncated,
            last and last.truncation_reason,
            last and last.info.get("truncation_reason"),
            rollout.meta["episode_truncated"],
            rollout.meta["truncation_reason"],
            rollout.meta["ended_by"],
        )
    return out


@pytest.mark.parametrize(
    ("env_cls", "target", "moves", "game_length"),
    [
        # a: 2 → 2; b: 2 → 4 ≥ 3, b wins on the 2nd iteration; a gets no outcome for it.
        (SilentLoserRace, 3, ("2", "2"), 2),
        # a: 2, b: 1 → a reaches 10 on the 7th iteration; b gets its terminal loss.
        (RaceToTenEnv, 10, ("2", "1"), 7),
    ],
)
async def test_game_ending_on_the_last_allowed_iteration_is_labelled_as_with_slack(
    env_cls: type[RaceToTenEnv], target: int, moves: tuple[str, str], game_length: int
) -> None:
    async def play(max_steps: int) -> list[Rollout]:
        protocol = MultiAgentProtocol({"a": agent([moves[0]]), "b": agent([moves[1]])})
        return await protocol.run(env=env_cls(target=target), max_steps=max_steps, env_seed=0)

    exact = end_labels(await play(game_length))
    assert exact == end_labels(await play(game_length + 3))
    for labels in exact.values():
        assert labels[3] != "max_steps" and labels[6] != "max_steps" and labels[7] != "max_steps"
    if env_cls is SilentLoserRace:
        # The agent that did not move: truncated by the env's end, its last step's next_obs cleared.
        assert exact["a"][1:] == (False, True, "env", "env", True, "env", "inactive")
        assert exact["b"][1:] == (True, False, None, None, False, None, "env_terminated")


async def test_game_still_going_at_the_step_limit_is_labelled_max_steps() -> None:
    # One iteration short of SilentLoserRace's end: b is still to move, so the limit cut the game.
    protocol = MultiAgentProtocol({"a": agent(["2"]), "b": agent(["2"])})
    labels = end_labels(await protocol.run(env=SilentLoserRace(target=3), max_steps=1))
    assert labels["a"][1:] == (False, True, "max_steps", "max_steps", True, "max_steps", "max_steps")
    # b never acted: no step to mark, but its episode still ended by the limit.
    assert labels["b"] == (0, None, None, None, None, False, None, "max_steps")
