"""How a delegating agent's outcome reaches the sub-agents it delegated to.

A sub-agent's rollout ends on one *reward step*: its last step whose reward counts towards
:attr:`~ludic_core.types.Rollout.total_reward` (an env step, or an env-targeted output that failed to
parse; see :mod:`ludic_core.credit`), so whatever credit assigner runs afterwards sees the reward. Its
*own* reward is that step's env component (``reward_components["env"]``, 0 on a parse failure); the
step's parser reward is the sub-agent's format reward and stays in every mode:

* ``"parent"`` — the own reward is replaced by the parent's return;
* ``"own"`` — the step is left as the env scored it;
* ``"sum"`` — the parent's return is added to the own reward.

The step's info keeps ``child_env_reward``, ``parent_return`` and ``child_reward`` for inspection,
whatever the mode; the rollout's meta says where the reward went (``child_reward_step_index``, None
when the rollout has no reward step, e.g. a child that failed before acting).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from ludic_core.types import AgentStep, EnvironmentStep, Rollout

__all__ = ["CHILD_REWARD_MODES", "ChildRewardMode", "apply_child_reward", "reward_step_index"]

ChildRewardMode: TypeAlias = Literal["parent", "own", "sum"]
CHILD_REWARD_MODES: tuple[ChildRewardMode, ...] = ("parent", "own", "sum")


def reward_step_index(rollout: Rollout) -> int | None:
    """Position in ``rollout.steps`` of its last step whose reward counts towards the return."""
    for position in range(len(rollout.steps) - 1, -1, -1):
        step = rollout.steps[position]
        if isinstance(step, EnvironmentStep):
            return position
        if isinstance(step, AgentStep) and step.action_target == "env" and step.parse_error:
            return position
    return None


def apply_child_reward(rollout: Rollout, parent_return: float, mode: ChildRewardMode) -> None:
    """Set the reward of a sub-agent's ``rollout`` from its parent's return (in place; see the module
    docstring for the modes)."""
    position = reward_step_index(rollout)
    rollout.meta["child_reward"] = mode
    rollout.meta["parent_return"] = parent_return
    rollout.meta["child_reward_step_index"] = None if position is None else rollout.steps[position].index
    if position is None:
        return
    step = rollout.steps[position]
    own = step.reward_components.get("env", 0.0)
    components = dict(step.reward_components)
    reward = step.reward
    if mode == "parent":
        components.pop("env", None)
        components["parent"] = parent_return
        reward = step.reward - own + parent_return
    elif mode == "sum":
        components["parent"] = parent_return
        reward = step.reward + parent_return
    info: dict[str, Any] = {
        **step.info,
        "child_env_reward": own,
        "parent_return": parent_return,
        "child_reward": mode,
    }
    rollout.steps[position] = attrs.evolve(step, reward=reward, reward_components=components, info=info)
