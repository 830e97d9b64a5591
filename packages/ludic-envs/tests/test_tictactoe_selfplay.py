from __future__ import annotations

import pytest

from ludic_core.errors import ConfigError, ProtocolError
from ludic_core.protocols.multi_agent import MultiAgentProtocol
from ludic_core.testing import ScriptedAgent, ScriptedChatClient, check_env
from ludic_envs.tictactoe import TicTacToeRewards, TicTacToeSelfPlayEnv


def test_players_alternate_and_both_see_every_move() -> None:
    env = TicTacToeSelfPlayEnv()
    start = env.reset(seed=0)
    assert set(start) == {"x", "o"} and env.agent_ids == ["x", "o"]
    assert env.active_agents == ["x"]
    out = env.step({"x": "B2"})
    assert set(out) == {"x", "o"}
    assert "X played B2" in out["o"].obs and "Your move" in out["o"].obs
    assert env.active_agents == ["o"]
    with pytest.raises(ProtocolError, match="'o'"):
        env.step({"x": "A1"})
    env.step({"o": "A1"})
    assert env.active_agents == ["x"]


def test_loser_gets_terminal_outcome_on_the_winning_move() -> None:
    env = TicTacToeSelfPlayEnv(rewards={"loss": -1.0})
    env.reset()
    for aid, move in [("x", "A1"), ("o", "B1"), ("x", "A2"), ("o", "B2")]:
        out = env.step({aid: move})
        assert not out["x"].terminated and not out["o"].terminated
    out = env.step({"x": "A3"})
    assert out["x"].terminated and out["x"].reward == 1.0 and out["x"].info["result"] == "win"
    assert out["o"].terminated and out["o"].reward == -1.0 and out["o"].info["result"] == "loss"
    assert env.active_agents == []
    with pytest.raises(ProtocolError, match="over"):
        env.step({"o": "C3"})


def test_illegal_move_forfeits() -> None:
    env = TicTacToeSelfPlayEnv(rewards=TicTacToeRewards(opponent_forfeit=0.3))
    env.reset()
    env.step({"x": "B2"})
    out = env.step({"o": "B2"})
    assert out["o"].reward == -1.0 and out["o"].info["result"] == "illegal_move"
    assert out["x"].reward == 0.3 and out["x"].info["result"] == "opponent_forfeit"
    assert out["x"].terminated and out["o"].terminated


def test_draw_rewards_each_side_by_its_own_play() -> None:
    env = TicTacToeSelfPlayEnv()
    env.reset()
    # X stands on a forced win after A1/B1 and lets it slip; O never had a win.
    moves = ["A1", "B1", "C1", "A2", "B2", "A3", "C2", "C3", "B3"]
    out = {}
    for move in moves:
        out = env.step({env.active_agents[0]: move})
    assert out["x"].info["result"] == out["o"].info["result"] == "draw"
    assert out["x"].reward == 0.5 and out["o"].reward == 1.0


def test_conformance() -> None:
    check_env(TicTacToeSelfPlayEnv(), actions=["A1", "B2", "C3", "A3", "C1", "zz"])


async def test_self_play_through_multi_agent_protocol() -> None:
    x_agent = ScriptedAgent(ScriptedChatClient(["A1", "A2", "A3"]))
    o_agent = ScriptedAgent(ScriptedChatClient(["B1", "B2"]))
    protocol = MultiAgentProtocol({"x": x_agent, "o": o_agent})
    rollouts = await protocol.run(env=TicTacToeSelfPlayEnv(rewards={"loss": -1.0}), max_steps=20, env_seed=0)
    by_agent = {r.meta["agent_id"]: r for r in rollouts}
    assert all(r.failure is None for r in rollouts), [r.failure for r in rollouts]
    assert by_agent["x"].total_reward == 1.0
    # The loser's terminal reward landed on its rollout although it never acted on the last move.
    assert by_agent["o"].total_reward == -1.0
    assert by_agent["o"].steps[-1].terminated
    assert len(by_agent["x"].env_steps) == 3 and len(by_agent["o"].env_steps) == 2
    assert not by_agent["o"].truncated
    # O's context saw X's winning move before the episode ended.
    assert any("X played A2" in m["content"] for m in o_agent.messages)


@pytest.mark.parametrize("action", [None, 5])
def test_an_action_that_is_not_text_forfeits_the_game(action: object) -> None:
    env = TicTacToeSelfPlayEnv()
    env.reset(seed=0)
    out = env.step({"x": action})  # type: ignore[dict-item]
    assert out["x"].terminated and out["o"].terminated
    assert out["x"].info["illegal_reason"] == "not a coordinate A1..C3"
    assert repr(action) in out["x"].obs


def test_start_board_starts_with_the_player_to_move() -> None:
    env = TicTacToeSelfPlayEnv(start_board="X........")
    start = env.reset()
    assert env.active_agents == ["o"]
    assert "Your move (B1, C1" in start["o"][0] and "Wait for O's move" in start["x"][0]
    env.step({"o": "B2"})
    assert env.active_agents == ["x"]
    env.reset()  # every game starts from the same position
    assert env.game.board.compact() == "X........"


@pytest.mark.parametrize(
    ("start_board", "match"),
    [("XXX.OO...", "already decided"), ("XX", "not a valid position"), (9, "string of 9 cells")],
)
def test_bad_start_board_is_refused_naming_it(start_board: object, match: str) -> None:
    with pytest.raises(ConfigError, match=rf"start_board.*{match}"):
        TicTacToeSelfPlayEnv(start_board=start_board)  # type: ignore[arg-type]


def test_hidden_opponent_move_gives_the_single_agent_envs_prompt() -> None:
    from ludic_envs.tictactoe import TicTacToeEnv

    selfplay = TicTacToeSelfPlayEnv(show_opponent_move=False, start_board="X........")
    single = TicTacToeEnv(show_opponent_move=False, agent_mark="O", start_board="X........")
    assert selfplay.reset()["o"][0] == single.env_reset(seed=0)[0]
    selfplay.step({"o": "B2"})
    out = selfplay.step({"x": "A2"})
    assert "played" not in out["o"].obs and out["o"].obs.startswith("You play O.")
    with pytest.raises(ConfigError, match="show_opponent_move"):
        TicTacToeSelfPlayEnv(show_opponent_move="no")  # type: ignore[arg-type]
