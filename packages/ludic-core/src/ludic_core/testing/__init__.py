"""Reusable test helpers: scripted clients, a minimal agent, a toy env and conformance checks.

Third parties can use these in their own suites (``check_env``, ``check_client``, ``check_agent``,
``check_publisher``, and ``check_public_api`` for a package root built with :mod:`ludic_core.exports`).
"""

from ludic_core.testing.checks import check_client, check_env
from ludic_core.testing.envs import GuessNumberEnv
from ludic_core.testing.growth import assert_linear_time
from ludic_core.testing.harness_checks import check_agent, check_publisher
from ludic_core.testing.public_api import check_public_api
from ludic_core.testing.scripted_agent import (
    ByteChatTemplate,
    ScriptedAgent,
    identity_parser,
    render_text_dialog,
)
from ludic_core.testing.scripted_clients import (
    ScriptedChatClient,
    SeededChatClient,
    TextChatClient,
    scripted_prompt_logprob,
)
from ludic_core.testing.tokenizers import ByteTokenizer, Encode

__all__ = [
    "assert_linear_time",
    "ByteChatTemplate",
    "ByteTokenizer",
    "Encode",
    "GuessNumberEnv",
    "ScriptedAgent",
    "ScriptedChatClient",
    "SeededChatClient",
    "TextChatClient",
    "check_agent",
    "check_client",
    "check_env",
    "check_public_api",
    "check_publisher",
    "identity_parser",
    "render_text_dialog",
    "scripted_prompt_logprob",
]
