"""Test helpers that third parties can use too: real tokenizers and chat templates built offline,
and a scripted client that speaks their token ids.

Typical pytest setup (session-scoped, so each tokenizer is built or loaded once per session)::

    import pytest
    from ludic_agents.testing import qwen25_tokenizer


    @pytest.fixture(scope="session")
    def qwen_tok():
        return qwen25_tokenizer()

Set ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` in tests; nothing here reaches a hub.
"""

from ludic_agents.testing.templates import QWEN25_CHAT_TEMPLATE, QWEN25_DEFAULT_SYSTEM
from ludic_agents.testing.token_clients import ScriptedCompletion, ScriptedTokenClient
from ludic_agents.testing.tokenizers import (
    RECIPE_VERSION,
    cache_dir,
    qwen25_tokenizer,
    smollm2_gguf_path,
    smollm2_tokenizer,
)

__all__ = [
    "QWEN25_CHAT_TEMPLATE",
    "QWEN25_DEFAULT_SYSTEM",
    "RECIPE_VERSION",
    "ScriptedCompletion",
    "ScriptedTokenClient",
    "cache_dir",
    "qwen25_tokenizer",
    "smollm2_gguf_path",
    "smollm2_tokenizer",
]
