"""One agent's step timeline during an episode: the bookkeeping both protocols share.

It turns the agent's model calls into :class:`AgentStep`s, env transitions into
:class:`EnvironmentStep`s, renews the turn id after every env step and parse failure, places rewards
(see :func:`split_parser_reward`) and applies end-of-episode truncation marks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ludic_core.harness import AgentActResult, AgentActStep
from ludic_core.ids import new_id
from ludic_core.seeding import seed_deriver
from ludic_core.types import (
    AgentStep,
    EnvironmentStep,
    EpisodeFailure,
    Info,
    Rollout,
    Step,
    StepOutcome,
    ToolResult,
    TruncationReason,
    _mark_step_truncated,
)

__all__ = ["DEFAULT_PARSE_FAILURE_OBS", "AgentTimeline", "merge_step_info", "split_parser_reward"]

DEFAULT_PARSE_FAILURE_OBS = "Invalid action."


def split_parser_reward(act_step: AgentActStep) -> tuple[float, dict[str, float], float]:
    """Where a call's parser reward lands: ``(agent_step_reward, agent_components, env_step_parser_reward)``.

    * env-targeted and parsed: the reward moves onto the env step (so it is counted once, with the
      env reward of that transition);
    * env-targeted parse failure: the penalty stays on the agent step (no env step happens);
    * internal/external tool-loop calls: 0 — a parser run on tool-call text is not a format verdict
      on an action, so it never enters the return.
    """
    result = act_step.parse_result
    if act_step.action_target != "env" or result is None:
        return 0.0, {}, 0.0
    if result.action is None:
        return result.reward, {"parser": result.reward}, 0.0
    return 0.0, {}, result.reward


def merge_step_info(*layers: Info | None) -> Info:
    """Later layers override earlier ones (agent info, then env info, then protocol bookkeeping)."""
    merged: Info = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return merged


@attrs.define
class AgentTimeline:
    """Mutable per-agent episode state owned by a protocol run."""

    agent_id: str
    turn_start_obs: str
    steps: list[Step] = attrs.field(factory=list)
    turn_id: str = attrs.field(factory=new_id)
    turn_agent_step_ids: list[str] = attrs.field(factory=list)
    finished: bool = False
    ended_by: str | None = None
    unattributed_reward: float = 0.0
    _seeds: tuple[int, Callable[..., int]] | None = attrs.field(default=None, init=False, repr=False)

    # -- seeds -------------------------------------------------------------------------------------

    def call_seed(self, sampling_seed: int | None, attempt: int, round_: int) -> int | None:
        """The seed of one model-call attempt: ``derive_seed(sampling_seed, agent_id, attempt, round_)``.

        One seed per attempt, so turns do not replay the same random stream. The episode's part
        (sampling seed, agent) is hashed once per episode, not once per call.
        """
        if sampling_seed is None:
            return None
        if self._seeds is None or self._seeds[0] != sampling_seed:
            self._seeds = (sampling_seed, seed_deriver(sampling_seed, self.agent_id))
        return self._seeds[1](attempt, round_)

    # -- recording ---------------------------------------------------------------------------------

    def record_act(self, result: AgentActResult, *, stop_on_parse_error: bool) -> AgentStep:
        """Log every model call of one ``act``; returns the final one."""
        steps = result.steps
        final = steps[-1]
        last: AgentStep | None = None
        for act_step in steps:
            trace = act_step.trace
            # split_parser_reward, spelled out: this runs for every model call.
            target = act_step.action_target
            parse_result = act_step.parse_result
            info = dict(act_step.info)
            info["action_target"] = target
            parse_error = target == "env" and parse_result is not None and parse_result.action is None
            reward = 0.0
            components: dict[str, float] = {}
            if parse_error:
                assert parse_result is not None
                reward = parse_result.reward
                components = {"parser": reward}
                info["parse_error"] = True
                info["parse_feedback_obs"] = parse_result.obs or DEFAULT_PARSE_FAILURE_OBS
            # The act step's fields were converted and checked when the agent built it; the recorded
            # step shares them (see AgentStep._trusted).
            last = AgentStep._trusted(
                len(self.steps),
                trace,
                act_step.prompt_messages,
                act_step.action,
                target,
                self.turn_id,
                act_step.loop_index,
                reward,
                components,
                parse_error,
                bool(parse_error and stop_on_parse_error and act_step is final),
                act_step.tool_calls,
                act_step.tool_results,
                info,
            )
            self.steps.append(last)
            self.turn_agent_step_ids.append(last.id)
        assert last is not None  # AgentActResult guarantees at least one step
        return last

    def attach_tool_results(self, results: list[ToolResult]) -> None:
        """Record an external handler's results on the external call that asked for them."""
        last = self.steps[-1]
        assert isinstance(last, AgentStep) and last.action_target == "external"
        previous = list(last.tool_results or ())
        self.steps[-1] = attrs.evolve(last, tool_results=[*previous, *results])

    def record_env_step(self, final_act: AgentActStep, outcome: StepOutcome) -> EnvironmentStep:
        parse_result = final_act.parse_result
        assert parse_result is not None and parse_result.action is not None
        # A parsed env action's parser reward goes onto its env step (split_parser_reward).
        parser_reward = parse_result.reward if final_act.action_target == "env" else 0.0
        source = self.steps[-1]
        assert isinstance(source, AgentStep)
        ended = outcome.terminated or outcome.truncated
        parsed_action = parse_result.action
        info = {**source.info, **(outcome.info or {}), "parsed_action": parsed_action}
        # Every field comes from the recorded agent step, the checked StepOutcome or the parse result:
        # nothing to convert again (see EnvironmentStep._trusted).
        step = EnvironmentStep._trusted(
            len(self.steps),
            # The recorded call's trace: the same tokens as the act step's, with the temperature the
            # protocol filled in.
            source.trace,
            self.turn_start_obs,
            final_act.action,
            parsed_action,
            None if ended else outcome.obs,
            self.turn_id,
            source.id,
            tuple(self.turn_agent_step_ids),
            outcome.reward + parser_reward,
            {"env": outcome.reward, "parser": parser_reward},
            bool(outcome.terminated),
            bool(outcome.truncated),
            info,
        )
        self.steps.append(step)
        if ended:
            self.finish("env_terminated" if outcome.terminated else "env_truncated")
        return step

    def new_turn(self, obs: str) -> None:
        self.turn_id = new_id()
        self.turn_agent_step_ids = []
        self.turn_start_obs = obs

    def finish(self, ended_by: str) -> None:
        self.finished = True
        self.ended_by = ended_by

    def apply_outcome_without_action(self, outcome: StepOutcome) -> None:
        """An outcome for an agent that did not act this step (e.g. the opponent's winning move).

        Its reward belongs to this agent's latest decision, so it is added to the latest step (and
        itemised as ``after_turn``); a terminal outcome ends the agent's episode on that step.
        """
        ended = outcome.terminated or outcome.truncated
        if not self.steps:
            self.unattributed_reward += outcome.reward
        elif outcome.reward != 0.0 or ended:
            last = self.steps[-1]
            components = dict(last.reward_components)
            components["after_turn"] = components.get("after_turn", 0.0) + outcome.reward
            changes: dict[str, Any] = {
                "reward": last.reward + outcome.reward,
                "reward_components": components,
                "info": merge_step_info(last.info, outcome.info),
            }
            if ended:
                changes["terminated"] = last.terminated or outcome.terminated
                changes["truncated"] = last.truncated or outcome.truncated
                if outcome.truncated and last.truncation_reason is None:
                    changes["truncation_reason"] = "env"
                if isinstance(last, EnvironmentStep):
                    changes["next_obs"] = None
            self.steps[-1] = attrs.evolve(last, **changes)
        if ended:
            self.finish("env_terminated" if outcome.terminated else "env_truncated")

    def mark_truncated(self, reason: TruncationReason, ended_by: str) -> None:
        """Mark the final step truncated (unless the episode already ended on it)."""
        self.finish(ended_by)
        if not self.steps:
            return
        last = self.steps[-1]
        if last.terminated or last.truncated:
            return
        self.steps[-1] = _mark_step_truncated(last, reason, {**last.info, "truncation_reason": reason})

    # -- output ------------------------------------------------------------------------------------

    def to_rollout(self, meta: Info, failure: EpisodeFailure | None) -> Rollout:
        last = self.steps[-1] if self.steps else None
        episode_truncated = last is not None and last.truncated
        rollout_meta: Info = {
            **meta,
            "agent_id": self.agent_id,
            "episode_truncated": episode_truncated,
            # A truncated episode's reason is its last step's (the last truncated step is that one).
            "truncation_reason": last.truncation_reason if last is not None and episode_truncated else None,
            "ended_by": "failure" if failure is not None else self.ended_by,
        }
        if self.unattributed_reward:
            rollout_meta["unattributed_reward"] = self.unattributed_reward
        return Rollout(list(self.steps), rollout_meta, failure)
