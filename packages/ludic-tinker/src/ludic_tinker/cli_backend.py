"""The ``tinker`` backend of ``ludic eval`` / ``ludic rollouts``: completions sampled on the Tinker service.

    ludic eval tictactoe --backend tinker --model Qwen/Qwen3-4B-Instruct-2507 -n 100

The registered ``"chat"`` agent renders each prompt with the model's chat template and
:class:`~ludic_tinker.TinkerChatClient` samples it, so rollouts carry token ids and logprobs. ``model``
is a Tinker base model or a ``tinker://`` sampler-weights path (``fake/tiny-char-lm`` uses the loopback
fake's byte tokenizer); ``base_urls`` and ``api_key_env`` left at their defaults mean the SDK's own
(``TINKER_BASE_URL``, ``TINKER_API_KEY``); ``request_timeout_s`` bounds each sample and the sampler's
creation. ``max_concurrency``, ``max_retries`` and ``device`` do not apply. Registered as the
``ludic.backends`` entry point ``tinker``; needs ludic-agents (``pip install "ludic-agents[hf]"``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs
import tinker

from ludic_core.errors import ConfigError
from ludic_core.run.backends import ClientBackend, require_chat_agent
from ludic_tinker._sdk import call_for_client_blocking
from ludic_tinker.client import TinkerChatClient
from ludic_tinker.session import TinkerTimeouts, connect

if TYPE_CHECKING:
    from ludic_core.run.configs import BackendConfig

__all__ = ["TinkerBackend", "fake_model_tokenizer"]

CHECKPOINT_SCHEME = "tinker://"


class TinkerBackend(ClientBackend):
    """Tinker sampling for the ``ludic`` commands (``token_level``: its rollouts are trainable)."""

    def __init__(
        self,
        config: BackendConfig,
        *,
        client: TinkerChatClient | None = None,
        chat_template: Any = None,
    ) -> None:
        """``client``: sample through this client (a recipe's, whose sampler the trainer refreshes)
        instead of opening ``config.model`` on the service; ``chat_template``: the agents' template
        (None: the one of the client's tokenizer)."""
        require_chat_agent()  # before the service is asked for a sampler
        if client is None:
            client, chat_template = _open_sampler(config)
        super().__init__(client, chat_template=chat_template)

    async def aclose(self) -> None:
        # The SDK's session ends with the process; there is nothing local to release.
        return None


def _sdk_default(config: BackendConfig, field: str) -> Any:
    """``config.<field>``, or None (the SDK's own default) when it is left at BackendConfig's default."""
    value = getattr(config, field)
    return None if value == getattr(attrs.fields(type(config)), field).default else value


def _service_url(config: BackendConfig) -> str | None:
    urls = _sdk_default(config, "base_urls")
    if urls is None:
        return None
    if len(urls) != 1:
        raise ConfigError(f"backend 'tinker' samples on one service; backend.base_urls lists {list(urls)}")
    return urls[0]


def _api_key(config: BackendConfig) -> str | None:
    variable = _sdk_default(config, "api_key_env")
    if variable is None:
        return None
    key = os.environ.get(variable)
    if not key:
        raise ConfigError(
            f"backend.api_key_env = {variable!r}, but that environment variable is not set (leave "
            "backend.api_key_env unset to use the SDK's TINKER_API_KEY or stored login)"
        )
    return key


def _open_sampler(config: BackendConfig) -> tuple[TinkerChatClient, Any]:
    """A client sampling ``config.model`` on the service, and the chat template its agents use."""
    model = config.model
    if not model:
        raise ConfigError(
            "backend 'tinker' needs backend.model (--model): a Tinker base model name, or the "
            f"{CHECKPOINT_SCHEME} path of saved sampler weights"
        )
    timeouts = TinkerTimeouts(create_client_s=config.request_timeout_s, sample_s=config.request_timeout_s)
    service = connect(base_url=_service_url(config), api_key=_api_key(config), timeouts=timeouts)
    saved_weights = model.startswith(CHECKPOINT_SCHEME)

    def open_sampler() -> tuple[Any, str]:
        created: Any = (
            service.create_sampling_client(model_path=model)
            if saved_weights
            else service.create_sampling_client(base_model=model)
        )
        if isinstance(created, tinker.APIFuture):  # SDK 0.38: a future of the client
            created = created.result(timeout=timeouts.create_client_s)
        # Saved weights: the tokenizer is that of the base model they were trained from.
        return created, str(created.get_base_model()) if saved_weights else model

    sampler, base_model = call_for_client_blocking(
        open_sampler, timeout_s=timeouts.create_client_s, what=f"create_sampling_client({model!r})"
    )
    tokenizer, chat_template = _tokenizer_for(sampler, base_model, timeout_s=timeouts.create_client_s)
    return TinkerChatClient(sampler, tokenizer, timeout_s=timeouts.sample_s), chat_template


def fake_model_tokenizer(base_model: str) -> tuple[Any, Any] | None:
    """``(tokenizer, chat_template)`` of ``ludic_tinker.testing``'s fake service when ``base_model`` is
    its model (the fake's vocabulary is bytes, and no Hub tokenizer exists for it), else None."""
    from ludic_tinker.testing import FAKE_BASE_MODEL

    if base_model != FAKE_BASE_MODEL:
        return None
    from ludic_tinker.testing import ByteChatTemplate, FakeTokenizer

    fake = FakeTokenizer()
    return fake, ByteChatTemplate(fake)


def _tokenizer_for(sampler: Any, base_model: str, *, timeout_s: float) -> tuple[Any, Any]:
    """The base model's tokenizer (and None: the agent's template over it), or the fake's pair."""
    fake = fake_model_tokenizer(base_model)
    if fake is not None:
        return fake
    tokenizer = call_for_client_blocking(
        sampler.get_tokenizer, timeout_s=timeout_s, what=f"the tokenizer of {base_model!r}"
    )
    return tokenizer, None
