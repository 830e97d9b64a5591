"""Backends of ``ludic eval``, ``ludic rollouts`` and the RL recipes: where completions come from.

A backend builds one fresh agent per episode around a shared client. ``openai`` is built in (an
:class:`~ludic_core.openai_client.OpenAIChatClient` and a :class:`~ludic_core.message_agent.MessageAgent`:
no torch, no tokenizer; message-level rollouts). Other packages contribute backends through the
entry-point group ``"ludic.backends"``: ludic-train ``local`` (an in-process transformers model),
ludic-vllm ``vllm`` (token ids and logprobs from a running vLLM server), ludic-tinker ``tinker``. A
backend's factory takes the :class:`~ludic_core.run.configs.BackendConfig` and returns a
:class:`Backend`. Token-level backends build their agents as the registered ``"chat"`` agent
(ludic-agents) over a :class:`TokenizedClient`: :class:`ClientBackend` does that for any client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ludic_core.client_pool import ClientPool
from ludic_core.errors import ConfigError, RegistryError
from ludic_core.harness import AgentHarness
from ludic_core.inference import ChatClient, ChatResponse, TokenCompletionRequest
from ludic_core.message_agent import MessageAgent
from ludic_core.openai_client import OpenAIChatClient
from ludic_core.parsing import Parser
from ludic_core.registry import AGENTS, Registry, make_agent
from ludic_core.run.configs import BackendConfig

__all__ = [
    "BACKENDS",
    "CHAT_AGENT",
    "PROVIDED_BY",
    "Backend",
    "ClientBackend",
    "OpenAIBackend",
    "TokenizedClient",
    "chat_agent_factory",
    "check_backend",
    "make_backend",
    "require_chat_agent",
]

CHAT_AGENT = "chat"
"""The registered agent token-level backends build (ludic-agents: an ``Agent`` on the client's chat
template)."""


@runtime_checkable
class Backend(Protocol):
    """``token_level``: whether its rollouts carry token ids (trainable) or only messages."""

    @property
    def token_level(self) -> bool: ...

    def agent_factory(
        self,
        *,
        parser: Parser,
        system_prompt: str | None,
        agent: str = CHAT_AGENT,
        agent_kwargs: Mapping[str, Any] | None = None,
    ) -> Callable[[], AgentHarness]:
        """A callable returning a fresh agent per episode; ``system_prompt`` None: the env's suggestion.
        ``agent``: the registered agent to build on this backend's client, with ``agent_kwargs``
        (:mod:`ludic_core.run.players`); a backend that cannot build it raises a ConfigError."""
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
        self.config = config

    def worker_factory(self) -> Callable[[], OpenAIBackend]:
        """How a rollout worker process builds this backend: from its config, with clients of its own."""
        return functools.partial(OpenAIBackend, self.config)

    def agent_factory(
        self,
        *,
        parser: Parser,
        system_prompt: str | None,
        agent: str = CHAT_AGENT,
        agent_kwargs: Mapping[str, Any] | None = None,
    ) -> Callable[[], AgentHarness]:
        if agent != CHAT_AGENT or agent_kwargs:
            raise ConfigError(
                f"backend.kind = {self.config.kind!r} builds message-level chat agents only; agent = {agent!r} "
                f"with agent_kwargs {dict(agent_kwargs or {})} needs a token-level backend (local, vllm, tinker)"
            )
        client = self.client

        def make() -> AgentHarness:
            return MessageAgent(client, parser=parser, system_prompt=system_prompt)

        return make

    async def aclose(self) -> None:
        await self.client.aclose()


def require_chat_agent() -> None:
    """Refuse early when the registered ``"chat"`` agent (ludic-agents) is not installed."""
    if CHAT_AGENT not in AGENTS:
        raise RegistryError(
            f"the token-level backends build their agents as the registered agent {CHAT_AGENT!r}, which "
            'ludic-agents provides: pip install "ludic-agents[hf]"'
        )


def chat_agent_factory(
    client: Any, *, parser: Parser, system_prompt: str | None, agent: str = CHAT_AGENT, **options: Any
) -> Callable[[], AgentHarness]:
    """A fresh registered ``agent`` (by default ``"chat"``) per episode over ``client`` (which carries
    the tokenizer whose chat template renders the prompts, unless ``options`` name a
    ``chat_template``); ``options`` that the agent does not take are a ConfigError naming them."""

    def make() -> AgentHarness:
        built: AgentHarness = make_agent(
            agent, client=client, parser=parser, system_prompt=system_prompt, **options
        )
        return built

    # One agent now, so a bad option is refused before any episode starts rather than by every one.
    try:
        make()
    except TypeError as exc:
        raise ConfigError(f"agent = {agent!r} with options {sorted(options)}: {exc}") from exc

    return make


@attrs.frozen
class TokenizedClient:
    """A token-level client paired with a tokenizer, so agents render prompts with that model's chat
    template (a vLLM client carries no tokenizer of its own)."""

    client: Any
    """A :class:`~ludic_core.inference.ChatClient` (and ``VersionedClient``) with ``aclose``."""
    tokenizer: Any

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        response: ChatResponse = await self.client.complete_tokens(request)
        return response

    async def get_policy_version(self) -> int:
        version: int = await self.client.get_policy_version()
        return version

    async def aclose(self) -> None:
        await self.client.aclose()


class ClientBackend:
    """A token-level backend over one shared client: one fresh registered ``"chat"`` agent (ludic-agents'
    ``Agent`` on the client's tokenizer, or on ``chat_template`` when given) per episode."""

    token_level = True

    def __init__(self, client: ChatClient, *, chat_template: Any = None) -> None:
        require_chat_agent()
        self.client = client
        self.chat_template = chat_template

    def agent_factory(
        self,
        *,
        parser: Parser,
        system_prompt: str | None,
        agent: str = CHAT_AGENT,
        agent_kwargs: Mapping[str, Any] | None = None,
    ) -> Callable[[], AgentHarness]:
        # The agent's own chat_template option, if the config gives one, wins over the backend's.
        options = {} if self.chat_template is None else {"chat_template": self.chat_template}
        options.update(agent_kwargs or {})
        return chat_agent_factory(
            self.client, parser=parser, system_prompt=system_prompt, agent=agent, **options
        )

    async def aclose(self) -> None:
        await self.client.aclose()  # type: ignore[attr-defined]


BACKENDS: Registry[Any] = Registry(
    "backend",
    "ludic.backends",
    builtins={"openai": "ludic_core.run.backends:OpenAIBackend"},
)
"""Backend kind -> factory ``(BackendConfig) -> Backend``."""

PROVIDED_BY: dict[str, str] = {"local": "ludic-train", "vllm": "ludic-vllm", "tinker": "ludic-tinker"}
"""Backends that other packages contribute, for the error when the package is not installed."""


def check_backend(config: BackendConfig) -> None:
    """Raise :class:`~ludic_core.errors.ConfigError` unless ``config.kind`` is installed (a kind whose
    package is missing names it); cheap, so commands call it before creating anything."""
    package = PROVIDED_BY.get(config.kind)
    if package is not None and config.kind not in BACKENDS:
        raise ConfigError(
            f"backend.kind = {config.kind!r} needs {package}: pip install {package} "
            f"(or use --backend openai against an OpenAI-compatible server)"
        )
    BACKENDS.check(config.kind, field="backend.kind")


def make_backend(config: BackendConfig) -> Backend:
    """The backend ``config.kind`` (see :func:`check_backend` for a missing one)."""
    check_backend(config)
    return BACKENDS.build_checked(Backend, config.kind, field="backend.kind", config=config)  # type: ignore[type-abstract]
