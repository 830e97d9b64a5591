"""The multi-agent loop: several agents (turn-based or simultaneous moves), one rollout per agent."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ludic_core.env import LudicEnv
from ludic_core.errors import ConfigError, ProtocolError
from ludic_core.harness import AgentActStep, AgentHarness, ExternalToolHandler
from ludic_core.protocols.acting import EpisodeStageError, act_with_external_tools, failure_from
from ludic_core.protocols.base import EpisodeRun, InteractionProtocol
from ludic_core.protocols.timeline import DEFAULT_PARSE_FAILURE_OBS, AgentTimeline
from ludic_core.types import EpisodeFailure, Rollout, StepOutcome

__all__ = ["MultiAgentProtocol"]


class MultiAgentProtocol(InteractionProtocol):
    """Drive several agents through a :class:`LudicEnv`; returns one rollout per managed agent.

    Each iteration asks every *active, managed, unfinished* agent to act, concurrently. Actions that
    parsed go to one ``env.step``; an agent whose output failed to parse is left out of that step and
    gets its feedback as the next observation (a new turn), exactly as in the single-agent protocol.
    When only unmanaged agents (built-in bots) are active, ``env.step({})`` lets them move.

    Outcomes for an agent that did not act (e.g. the loser of a turn-based game) add their reward to
    that agent's latest step and end its episode if terminal. Agents finish independently; the loop
    ends when every managed agent has finished or the env has nobody left to move.

    Rules shared with :class:`~ludic_core.protocols.SingleAgentProtocol`: the system prompt is the
    agent's default, else the env's suggestion; external tool calls go to the handler (one for all
    agents, or a mapping by agent id); ``stop_on_parse_error`` ends the episode for everyone (the
    failing agent's step is terminated, the others are truncated with reason ``env``); running out of
    ``max_steps`` truncates every unfinished agent with reason ``max_steps``, unless the env has nobody
    left to move by then (the game ended on the last allowed iteration): those agents are truncated with
    reason ``env`` and ``ended_by="inactive"``, as they would be with more ``max_steps`` to spare.
    """

    name = "multi_agent"

    def __init__(
        self,
        agents: Mapping[str, AgentHarness],
        *,
        stop_on_parse_error: bool = False,
        external_tool_handler: ExternalToolHandler | Mapping[str, ExternalToolHandler] | None = None,
        max_external_rounds: int = 32,
    ) -> None:
        if not agents:
            raise ConfigError("MultiAgentProtocol needs at least one agent, got an empty mapping")
        self.agents = dict(agents)
        self.stop_on_parse_error = stop_on_parse_error
        self.external_tool_handler = external_tool_handler
        self.max_external_rounds = max_external_rounds

    def _handler_for(self, agent_id: str) -> ExternalToolHandler | None:
        handler = self.external_tool_handler
        if isinstance(handler, Mapping):
            return handler.get(agent_id)
        return handler

    async def play(self, episode: EpisodeRun) -> list[Rollout]:
        env = episode.env
        unknown = sorted(set(self.agents) - set(env.agent_ids))
        if unknown:
            raise ConfigError(
                f"agents {unknown} are not agents of {env.name} (agent_ids={list(env.agent_ids)})"
            )
        timelines = {aid: AgentTimeline(agent_id=aid, turn_start_obs="") for aid in self.agents}
        failure: EpisodeFailure | None = None
        try:
            await self._loop(episode, timelines)
        except Exception as exc:  # reported on every rollout, never lost or re-raised
            failure = failure_from(exc)
        meta = {"protocol": self.name, "env_name": env.name, "agents": sorted(self.agents)}
        return [timelines[aid].to_rollout(meta, failure) for aid in self.agents]

    async def _loop(self, episode: EpisodeRun, timelines: dict[str, AgentTimeline]) -> None:
        env = episode.env
        try:
            initial = env.reset(seed=episode.env_seed)
            suggested = env.suggested_sysprompt
        except Exception as exc:
            raise EpisodeStageError("env", exc) from exc
        for aid, agent in self.agents.items():
            try:
                agent.reset(system_prompt=agent.default_system_prompt or suggested)
                if aid in initial:
                    obs, info = initial[aid]
                    agent.on_env_reset(obs, info)
                    timelines[aid].turn_start_obs = obs
            except Exception as exc:
                raise EpisodeStageError("agent", exc) from exc

        for attempt in range(episode.max_steps):
            active = list(env.active_agents)
            to_poll = [a for a in active if a in self.agents and not timelines[a].finished]
            if not to_poll:
                if not self._anyone_to_move(active, timelines):
                    self._end_unfinished(timelines, "env", "inactive")
                    return
                self._deliver(env, {}, await self._env_step(env, {}), timelines)
                continue

            finals = await self._act_all(to_poll, timelines, attempt, episode)
            actions: dict[str, str] = {}
            stop_episode = False
            for aid, final in finals.items():
                if final.action_target == "internal":
                    continue
                assert final.parse_result is not None
                if final.parse_result.action is not None:
                    actions[aid] = final.parse_result.action
                    continue
                if self.stop_on_parse_error:
                    timelines[aid].finish("parse_error")
                    stop_episode = True
                    continue
                feedback = final.parse_result.obs or DEFAULT_PARSE_FAILURE_OBS
                self._feed(aid, feedback, {"parse_error": True, "parse_feedback_obs": feedback})
                timelines[aid].new_turn(feedback)
            if stop_episode:
                self._end_unfinished(timelines, "env", "peer_parse_error")
                return
            if actions:
                self._deliver(
                    env, {a: finals[a] for a in actions}, await self._env_step(env, actions), timelines
                )
            if all(t.finished for t in timelines.values()):
                return
        # A game that ended on the last allowed iteration (e.g. the winner's move, with no outcome for
        # the agent that did not move) ended because of the env, not the step limit: label it exactly
        # as the next iteration would have, so the label does not depend on slack in max_steps.
        if not self._anyone_to_move(list(env.active_agents), timelines):
            self._end_unfinished(timelines, "env", "inactive")
            return
        self._end_unfinished(timelines, "max_steps", "max_steps")

    def _anyone_to_move(self, active: list[str], timelines: dict[str, AgentTimeline]) -> bool:
        """Whether the env still expects a move: from a managed agent whose episode goes on, or a bot."""
        return any(a not in self.agents or not timelines[a].finished for a in active)

    async def _act_all(
        self,
        agent_ids: list[str],
        timelines: dict[str, AgentTimeline],
        attempt: int,
        episode: EpisodeRun,
    ) -> dict[str, AgentActStep]:
        try:
            async with asyncio.TaskGroup() as group:
                tasks = {
                    aid: group.create_task(
                        act_with_external_tools(
                            self.agents[aid],
                            timelines[aid],
                            episode,
                            attempt=attempt,
                            external_tool_handler=self._handler_for(aid),
                            stop_on_parse_error=self.stop_on_parse_error,
                            max_external_rounds=self.max_external_rounds,
                        )
                    )
                    for aid in agent_ids
                }
        except BaseExceptionGroup as group_error:
            # The first failure is the episode's failure; the others were cancelled because of it.
            raise group_error.exceptions[0] from group_error
        return {aid: task.result() for aid, task in tasks.items()}

    @staticmethod
    async def _env_step(env: LudicEnv[Any], actions: dict[str, str]) -> dict[str, StepOutcome]:
        try:
            outcomes = await env.astep(actions)
        except Exception as exc:
            raise EpisodeStageError("env", exc) from exc
        missing = sorted(set(actions) - set(outcomes))
        if missing:
            raise EpisodeStageError(
                "env", ProtocolError(f"{env.name}.step returned no outcome for acting agents {missing}")
            )
        return outcomes

    def _deliver(
        self,
        env: LudicEnv[Any],
        acted: dict[str, AgentActStep],
        outcomes: dict[str, StepOutcome],
        timelines: dict[str, AgentTimeline],
    ) -> None:
        for aid, outcome in outcomes.items():
            timeline = timelines.get(aid)
            if timeline is None:
                if aid not in env.agent_ids:
                    raise EpisodeStageError(
                        "env", ProtocolError(f"{env.name}.step returned an outcome for unknown agent {aid!r}")
                    )
                continue  # an unmanaged bot
            if timeline.finished:
                continue
            if aid in acted:
                timeline.record_env_step(acted[aid], outcome)
                if not timeline.finished:
                    self._feed(aid, outcome.obs, outcome.info)
                    timeline.new_turn(outcome.obs)
                continue
            timeline.apply_outcome_without_action(outcome)
            if not timeline.finished:
                # Not a turn boundary for this agent: the obs just joins its context before it acts.
                self._feed(aid, outcome.obs, outcome.info)
                timeline.turn_start_obs = outcome.obs

    @staticmethod
    def _end_unfinished(timelines: dict[str, AgentTimeline], reason: str, ended_by: str) -> None:
        for timeline in timelines.values():
            if not timeline.finished:
                timeline.mark_truncated("max_steps" if reason == "max_steps" else "env", ended_by=ended_by)

    def _feed(self, agent_id: str, obs: str, info: dict[str, Any]) -> None:
        try:
            self.agents[agent_id].on_after_step(obs, info)
        except Exception as exc:
            raise EpisodeStageError("agent", exc) from exc
