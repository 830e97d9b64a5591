"""Interaction protocols: the explicit agent–env loop for one or many agents."""

from ludic_core.protocols.base import InteractionProtocol
from ludic_core.protocols.multi_agent import MultiAgentProtocol
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.protocols.timeline import DEFAULT_PARSE_FAILURE_OBS, split_parser_reward

__all__ = [
    "DEFAULT_PARSE_FAILURE_OBS",
    "InteractionProtocol",
    "MultiAgentProtocol",
    "SingleAgentProtocol",
    "split_parser_reward",
]
