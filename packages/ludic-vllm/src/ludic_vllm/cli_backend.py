"""The ``vllm`` backend of ``ludic eval`` / ``ludic rollouts``: token ids and logprobs from running vLLM
servers.

``ludic rollouts tictactoe --backend vllm --base-url http://host:8000/v1 --model /models/m -k 8 -o
data.jsonl`` renders each prompt with the served model's chat template (``backend.tokenizer``, default
``backend.model``: a directory holding the tokenizer), sends the token ids to the server's
``/v1/completions`` (:class:`~ludic_vllm.client.VLLMClient`: vLLM's own OpenAI server, no Ludic
extension needed) and records the completion's token ids and behaviour logprobs, so the rollouts train
as they were sampled (``ludic train offline-rl``). Several ``--base-url`` servers (the same weights)
share the requests, each to the least busy one.

Registered as the ``ludic.backends`` entry point ``vllm`` of ludic-vllm. Rendering needs the tokenizer
(``transformers``) and the registered ``"chat"`` agent: ``pip install "ludic-agents[hf]"``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ludic_core.client_pool import ClientPool
from ludic_core.errors import ConfigError, missing_extra
from ludic_core.run.backends import ClientBackend, TokenizedClient, require_chat_agent
from ludic_core.run.configs import BackendConfig
from ludic_vllm._http import RetryPolicy
from ludic_vllm.client import VLLMClient

__all__ = ["VLLMServerBackend", "load_tokenizer", "server_root"]


def server_root(url: str) -> str:
    """``http://host:8000`` for ``http://host:8000/v1`` (the OpenAI base URL users pass)."""
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def load_tokenizer(source: str) -> Any:
    """The tokenizer (with its chat template) at ``source``, a model directory or a cached hub id."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise missing_extra("ludic-agents", "hf", "transformers") from exc
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"backend.tokenizer {source!r}: no tokenizer could be loaded ({exc}); set backend.tokenizer "
            "(or --model) to a directory holding the served model's tokenizer"
        ) from exc


class VLLMServerBackend(ClientBackend):
    """Token-level sampling from the vLLM servers at ``config.base_urls`` serving ``config.model``."""

    def __init__(self, config: BackendConfig) -> None:
        if not config.model:
            raise ConfigError(
                "backend 'vllm' needs backend.model (--model): the served model's name (its directory, "
                "or set backend.tokenizer to the directory holding its tokenizer)"
            )
        require_chat_agent()
        tokenizer = load_tokenizer(config.tokenizer or config.model)
        clients = [
            VLLMClient(
                base_url=server_root(url),
                model=config.model,
                max_concurrency=config.max_concurrency,
                request_timeout_s=config.request_timeout_s,
                retry=RetryPolicy(max_attempts=config.max_retries + 1),
            )
            for url in config.base_urls
        ]
        client: VLLMClient | ClientPool = clients[0] if len(clients) == 1 else ClientPool(clients)
        super().__init__(TokenizedClient(client, tokenizer))
        self.config = config

    def worker_factory(self) -> Callable[[], VLLMServerBackend]:
        """How a rollout worker process builds this backend: from its config, with clients of its own."""
        return functools.partial(VLLMServerBackend, self.config)
