"""Backends of ``ludic eval`` and ``ludic rollouts``: where the agent's completions come from.

A backend builds one fresh agent per episode around a shared client. ``openai`` is built in (an
:class:`~ludic_core.openai_client.OpenAIChatClient` and a :class:`~ludic_core.message_agent.MessageAgent`:
no torch, no tokenizer); ``vllm`` is the same backend, since a vLLM server speaks the OpenAI API.
Other packages contribute backends through the entry-point group ``"ludic.backends"``: ludic-train the
``local`` backend (an in-process transformers model). A backend's factory takes the
:class:`~ludic_core.cli.run_config.BackendConfig` and returns a :class:`Backend`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ludic_core.cli.run_config import BackendConfig
from ludic_core.client_pool import ClientPool
from ludic_core.errors import ConfigError
from ludic_core.harness import AgentHarness
from ludic_core.message_agent import MessageAgent
from ludic_core.openai_client import OpenAIChatClient
from ludic_core.parsing import Parser
from ludic_core.registry import Registry

__all__ = ["BACKENDS", "PROVIDED_BY", "Backend", "OpenAIBackend", "check_backend", "make_backend"]


@runtime_checkable
class Backend(Protocol):
    """``token_level``: whether its rollouts carry token ids (trainable) or only messages."""

    @property
    def token_level(self) -> bool: ...

    def agent_factory(self, *, parser: Parser, system_prompt: str | None) -> Callable[[], AgentHarness]:
        """A callable returning a fresh agent per episode; ``system_prompt`` None: the env's suggestion."""
        ...

    async def aclose(self) -> None: ...


class OpenAIBackend:
    """OpenAI-compatible servers (vLLM, SGLang, a hosted API) through :class:`OpenAIChatClient`: one
    client per URL in ``base_urls``, several spread over a :class:`~ludic_core.client_pool.ClientPool`
    (each request to the least busy server)."""

    token_level = False

    def __init__(self, config: BackendConfig) -> None:
        if not config.model:
            raise ConfigError(
                f"backend {config.kind!r} needs backend.model (--model): the model name the servers at "
                f"{', '.join(config.base_urls)} serve"
            )
        clients = [
            OpenAIChatClient(
                url,
                config.model,
                api_key_env=config.api_key_env,
                max_concurrency=config.max_concurrency,
                request_timeout_s=config.request_timeout_s,
                max_retries=config.max_retries,
            )
            for url in config.base_urls
        ]
        self.client: OpenAIChatClient | ClientPool = clients[0] if len(clients) == 1 else ClientPool(clients)

    def agent_factory(self, *, parser: Parser, system_prompt: str | None) -> Callable[[], AgentHarness]:
        client = self.client

        def make() -> AgentHarness:
            return MessageAgent(client, parser=parser, system_prompt=system_prompt)

        return make

    async def aclose(self) -> None:
        await self.client.aclose()


BACKENDS: Registry[Any] = Registry(
    "backend",
    "ludic.backends",
    builtins={
        "openai": "ludic_core.cli.backends:OpenAIBackend",
        "vllm": "ludic_core.cli.backends:OpenAIBackend",
    },
)
"""Backend kind -> factory ``(BackendConfig) -> Backend``."""

PROVIDED_BY: dict[str, str] = {"local": "ludic-train", "tinker": "ludic-tinker"}
"""Backends that other packages contribute, for the error when the package is not installed."""


def check_backend(config: BackendConfig) -> None:
    """Raise :class:`~ludic_core.errors.ConfigError` unless ``config.kind`` is installed (a kind whose
    package is missing names it); cheap, so commands call it before creating anything."""
    if config.kind not in BACKENDS:
        package = PROVIDED_BY.get(config.kind)
        if package is not None:
            raise ConfigError(
                f"backend {config.kind!r} needs {package}: pip install {package} "
                f"(or use --backend openai against an OpenAI-compatible server)"
            )
        raise ConfigError(f"unknown backend {config.kind!r}; installed backends: {BACKENDS.names()}")


def make_backend(config: BackendConfig) -> Backend:
    """The backend ``config.kind`` (see :func:`check_backend` for a missing one)."""
    check_backend(config)
    backend = BACKENDS.build(config.kind, config=config)
    if not isinstance(backend, Backend):
        raise ConfigError(f"backend {config.kind!r} built {type(backend).__name__}, which is not a Backend")
    return backend
