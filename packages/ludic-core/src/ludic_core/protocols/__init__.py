"""Interaction protocols: the explicit agent–env loop for one agent, many agents, or a hierarchy of
agents that delegate subtasks to sub-agents."""

from ludic_core.protocols.base import InteractionProtocol
from ludic_core.protocols.delegating import DelegatingProtocol, DelegationSettings
from ludic_core.protocols.multi_agent import MultiAgentProtocol
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.protocols.subtask_env import SubtaskEnv
from ludic_core.protocols.timeline import DEFAULT_PARSE_FAILURE_OBS, split_parser_reward

__all__ = [
    "DEFAULT_PARSE_FAILURE_OBS",
    "DelegatingProtocol",
    "DelegationSettings",
    "InteractionProtocol",
    "MultiAgentProtocol",
    "SingleAgentProtocol",
    "SubtaskEnv",
    "split_parser_reward",
]
