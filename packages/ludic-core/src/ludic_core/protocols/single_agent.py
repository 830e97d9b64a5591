"""The single-agent loop: one agent, one env, one rollout."""

from __future__ import annotations

from typing import Any

from ludic_core.errors import ConfigError, ProtocolError
from ludic_core.harness import AgentHarness, ExternalToolHandler
from ludic_core.protocols.acting import (
    EpisodeStageError,
    act_with_external_tools,
    always_active,
    direct_env_step,
    direct_step,
    failure_from,
)
from ludic_core.protocols.base import EpisodeRun, InteractionProtocol
from ludic_core.protocols.timeline import DEFAULT_PARSE_FAILURE_OBS, AgentTimeline
from ludic_core.types import EpisodeFailure, Rollout

__all__ = ["SingleAgentProtocol"]


class SingleAgentProtocol(InteractionProtocol):
    """Drive one agent against a one-agent env.

    Each of the ``max_steps`` iterations is one turn attempt:

    * the agent acts (external tool calls go to ``external_tool_handler`` and the agent acts again,
      within the same turn);
    * a parse failure never reaches the env: the feedback (or ``"Invalid action."``) is fed back as the
      next observation and a new turn starts; with ``stop_on_parse_error`` the episode ends there;
    * a parsed action goes to ``env.step``; the turn's env step carries env reward + parser reward.

    System prompt: the agent's own default if it has one, else the env's suggestion.
    Ending: env termination/truncation (reason ``env``), the env no longer listing the agent as active
    (reason ``env``, ``ended_by="inactive"``, checked before the step limit too), or running out of
    ``max_steps``, which marks the final step truncated with reason ``max_steps``.
    """

    name = "single_agent"

    def __init__(
        self,
        agent: AgentHarness,
        *,
        stop_on_parse_error: bool = False,
        external_tool_handler: ExternalToolHandler | None = None,
        max_external_rounds: int = 32,
    ) -> None:
        self.agent = agent
        self.stop_on_parse_error = stop_on_parse_error
        self.external_tool_handler = external_tool_handler
        self.max_external_rounds = max_external_rounds

    async def play(self, episode: EpisodeRun) -> list[Rollout]:
        env = episode.env
        meta = {"protocol": self.name, "env_name": env.name}
        agent_ids = list(env.agent_ids)
        if len(agent_ids) != 1:
            raise ConfigError(
                f"SingleAgentProtocol needs an env with exactly one agent; {env.name} has {agent_ids}"
            )
        agent_id = agent_ids[0]
        timeline = AgentTimeline(agent_id=agent_id, turn_start_obs="")
        failure: EpisodeFailure | None = None
        try:
            await self._loop(episode, agent_id, timeline)
        except Exception as exc:  # reported on the rollout, never lost or re-raised
            failure = failure_from(exc)
        return [timeline.to_rollout(meta, failure)]

    async def _loop(self, episode: EpisodeRun, agent_id: str, timeline: AgentTimeline) -> None:
        env = episode.env
        try:
            initial = env.reset(seed=episode.env_seed)
            system_prompt = self.agent.default_system_prompt or env.suggested_sysprompt
        except Exception as exc:
            raise EpisodeStageError("env", exc) from exc
        if agent_id not in initial:
            raise EpisodeStageError(
                "env", ProtocolError(f"{env.name}.reset returned no observation for {agent_id!r}")
            )
        obs, info = initial[agent_id]
        try:
            self.agent.reset(system_prompt=system_prompt)
            self.agent.on_env_reset(obs, info)
        except Exception as exc:
            raise EpisodeStageError("agent", exc) from exc
        timeline.turn_start_obs = obs
        step_action = direct_env_step(env)  # no dicts around the action and the outcome
        step_now = direct_step(env) if step_action is None else None
        ask_active = not always_active(env)

        for attempt in range(episode.max_steps):
            if ask_active and agent_id not in env.active_agents:
                # The env stopped asking for actions without ending the episode for this agent.
                timeline.mark_truncated("env", ended_by="inactive")
                return
            final = await act_with_external_tools(
                self.agent,
                timeline,
                episode,
                attempt=attempt,
                external_tool_handler=self.external_tool_handler,
                stop_on_parse_error=self.stop_on_parse_error,
                max_external_rounds=self.max_external_rounds,
            )
            if final.action_target == "internal":
                continue
            assert final.parse_result is not None
            if final.parse_result.action is None:
                if self.stop_on_parse_error:
                    timeline.finish("parse_error")
                    return
                feedback = final.parse_result.obs or DEFAULT_PARSE_FAILURE_OBS
                self._feed(feedback, {"parse_error": True, "parse_feedback_obs": feedback})
                timeline.new_turn(feedback)
                continue
            action = final.parse_result.action
            try:
                if step_action is not None and isinstance(action, str):
                    outcome = step_action(action)
                else:
                    actions = {agent_id: action}
                    outcomes = step_now(actions) if step_now is not None else await env.astep(actions)
                    if agent_id not in outcomes:
                        raise ProtocolError(f"{env.name}.step returned no outcome for {agent_id!r}")
                    outcome = outcomes[agent_id]
            except Exception as exc:
                raise EpisodeStageError("env", exc) from exc
            timeline.record_env_step(final, outcome)
            if timeline.finished:
                return
            self._feed(outcome.obs, outcome.info)
            timeline.new_turn(outcome.obs)
        # Same label as the next iteration would give, so it does not depend on slack in max_steps.
        if ask_active and agent_id not in env.active_agents:
            timeline.mark_truncated("env", ended_by="inactive")
            return
        timeline.mark_truncated("max_steps", ended_by="max_steps")

    def _feed(self, obs: str, info: dict[str, Any]) -> None:
        try:
            self.agent.on_after_step(obs, info)
        except Exception as exc:
            raise EpisodeStageError("agent", exc) from exc
