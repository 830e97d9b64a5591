"""Async token-in/token-out client for a vLLM server (``/v1/completions``), implementing
:class:`ludic_core.inference.ChatClient` and :class:`~ludic_core.inference.VersionedClient`.

One prompt per request, so seeds stay independent and retries per sample. Completion ids, chosen-token
logprobs (after temperature under ``--logprobs-mode processed_logprobs``, which ``ludic-vllm serve``
sets; untempered at temperature 0) and the finish reason come back, with the request's temperature as
``sampling_temperature``. Prompt logprobs are requested as ``prompt_logprobs: 0`` and are raw
(:func:`parse_prompt_logprobs`). Policy versions come from the ``x-ludic-policy-version-start`` /
``x-ludic-policy-version`` headers the Ludic routes stamp; a plain vLLM server gives ``None``.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import attrs

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, ProtocolError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.logs import get_logger
from ludic_core.types import ChatResponse
from ludic_core.validation import check_int
from ludic_vllm._http import RetryPolicy, SessionHolder, error_for_status, retry_transient, with_deadline
from ludic_vllm.control import ServerControl, ServerHealth
from ludic_vllm.errors import RequestRejectedError
from ludic_vllm.update_wire import HEADER_POLICY_VERSION, HEADER_POLICY_VERSION_START

__all__ = ["VLLM_EXTENSION_KEYS", "VLLMClient", "VLLMClientConfig", "parse_prompt_logprobs"]

log = get_logger("ludic_vllm.client")

VLLM_EXTENSION_KEYS: frozenset[str] = frozenset(
    {
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "cache_salt",
        "vllm_xargs",
        "logit_bias",
        "allowed_token_ids",
        "bad_words",
        "truncate_prompt_tokens",
        "priority",
        "extra_body",
    }
)
"""Keys accepted in ``request.extensions["vllm"]``; ``extra_body`` is merged into the JSON body as-is
(for fields newer than this list). Any other key is rejected rather than ignored."""


def _positive(_i: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"VLLMClientConfig.{attribute.name} must be > 0, got {value!r}")


def _check_url(_i: Any, _a: Any, value: str) -> None:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ConfigError(f"VLLMClientConfig.base_url must start with http:// or https://, got {value!r}")


@attrs.frozen
class VLLMClientConfig:
    """Connection settings for :class:`VLLMClient`.

    ``request_timeout_s`` is the deadline of one generation request as a whole (not per socket read):
    it must exceed the longest generation plus any pause or weight update the request may sit through.
    ``control_timeout_s`` bounds each control-plane call the same way. ``keepalive_s``
    stays below uvicorn's 5 s keep-alive so that a pooled connection is never reused just as the server
    closes it. ``retry_aborted`` resubmits a request the server aborted (``finish_reason == "abort"``,
    e.g. an ``abort``-mode pause) up to ``max_abort_retries`` times; the last abort is returned as is.
    """

    base_url: str = attrs.field(default="http://127.0.0.1:8000", validator=_check_url)
    model: str | None = None
    max_concurrency: int = 64
    connect_timeout_s: float = attrs.field(default=10.0, validator=_positive)
    request_timeout_s: float = attrs.field(default=900.0, validator=_positive)
    control_timeout_s: float = attrs.field(default=60.0, validator=_positive)
    keepalive_s: float = attrs.field(default=3.0, validator=_positive)
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)
    api_token: str | None = None
    retry_aborted: bool = True
    max_abort_retries: int = 3
    seed: int | None = None
    """Seeds the client's own jitter RNG (never global state)."""

    def __attrs_post_init__(self) -> None:
        check_int("VLLMClientConfig.max_concurrency", self.max_concurrency, 1)
        if self.max_abort_retries < 0:
            raise ConfigError(
                f"VLLMClientConfig.max_abort_retries must be >= 0, got {self.max_abort_retries!r}"
            )


def _header_version(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise DataError(f"server sent a non-integer {name} header: {value!r}") from exc


def parse_prompt_logprobs(raw: object, prompt_token_ids: Sequence[int]) -> list[float]:
    """The prompt logprobs of a ``/v1/completions`` choice, one per prompt token after the first.

    vLLM answers ``prompt_logprobs: k`` with one entry per prompt token: ``null`` for the first (it has
    no context), then a mapping from token id (``"72"``, or ``"token_id:72"`` under
    ``return_tokens_as_token_ids`` on some versions) to ``{"logprob": ..., "rank": ...}`` that holds the
    prompt token itself plus up to ``k`` alternatives. Anything else raises :class:`ProtocolError`.
    """
    if not isinstance(raw, list):
        raise ProtocolError(
            "prompt logprobs were requested but choices[0].prompt_logprobs is "
            f"{'missing' if raw is None else f'a {type(raw).__name__}, not a list'}"
        )
    if len(raw) != len(prompt_token_ids):
        raise ProtocolError(
            f"choices[0].prompt_logprobs has {len(raw)} entries for a {len(prompt_token_ids)}-token prompt; "
            "vLLM sends one per prompt token"
        )
    values: list[float] = []
    for position in range(1, len(raw)):
        entry, token = raw[position], prompt_token_ids[position]
        found = None
        if isinstance(entry, Mapping):
            found = entry.get(str(token), entry.get(f"token_id:{token}"))
        logprob = found.get("logprob") if isinstance(found, Mapping) else None
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)):
            raise ProtocolError(
                f"choices[0].prompt_logprobs[{position}] has no logprob for prompt token {token}: {entry!r:.300}"
            )
        values.append(float(logprob))
    return values


class VLLMClient:
    """Token-in/token-out :class:`~ludic_core.inference.ChatClient` over a vLLM server.

    Bounded concurrency (a semaphore plus the connector limit as a backstop), pooled keep-alive
    connections, per-request timeouts, and retries with backoff and jitter on transport errors and HTTP
    502/503/504 only. Bad requests (a prompt longer than the context, a bad sampling parameter) raise
    :class:`~ludic_vllm.errors.RequestRejectedError` at once.

    Use as ``async with VLLMClient(cfg) as client`` or call :meth:`aclose`.
    """

    def __init__(self, config: VLLMClientConfig | None = None, **overrides: Any) -> None:
        if config is None:
            config = VLLMClientConfig(**overrides)
        elif overrides:
            config = attrs.evolve(config, **overrides)
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self._rng = random.Random(config.seed)
        self._sessions = SessionHolder(self._new_session)
        self._semaphores: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._model: str | None = config.model
        self.control = ServerControl(
            self.base_url,
            api_token=config.api_token,
            connect_timeout_s=config.connect_timeout_s,
            timeout_s=config.control_timeout_s,
            retry=config.retry,
            seed=None if config.seed is None else config.seed + 1,
        )

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self.config.max_concurrency,
            limit_per_host=0,
            keepalive_timeout=self.config.keepalive_s,
            enable_cleanup_closed=True,
        )
        headers = {"Authorization": f"Bearer {self.config.api_token}"} if self.config.api_token else {}
        return aiohttp.ClientSession(connector=connector, headers=headers)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            self._semaphores = {loop: asyncio.Semaphore(self.config.max_concurrency)}
            sem = self._semaphores[loop]
        return sem

    async def aclose(self) -> None:
        await self._sessions.aclose()
        await self.control.aclose()

    async def __aenter__(self) -> VLLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- server state -----------------------------------------------------------------------------

    async def wait_until_ready(self, timeout_s: float = 300.0) -> ServerHealth:
        return await self.control.wait_until_ready(timeout_s)

    async def health(self) -> ServerHealth:
        return await self.control.health()

    async def get_policy_version(self) -> int:
        """The server's current policy version; raises on failure (never guesses)."""
        return await self.control.version()

    async def model_name(self) -> str:
        """The served model name (``config.model``, else the first entry of ``/v1/models``)."""
        if self._model is not None:
            return self._model
        url = f"{self.base_url}/v1/models"

        async def once() -> str:
            timeout = aiohttp.ClientTimeout(
                total=None,
                sock_connect=self.config.connect_timeout_s,
                sock_read=self.config.control_timeout_s,
            )

            async def exchange() -> tuple[int, str]:
                async with self._sessions.get().get(url, timeout=timeout) as resp:
                    return resp.status, await resp.text()

            status, body = await with_deadline(
                exchange,
                deadline_s=self.config.control_timeout_s,
                what=f"GET {url}",
                setting="control_timeout_s",
            )
            if status >= 400:
                raise error_for_status(status, body, url)
            try:
                data = json.loads(body)
            except ValueError as exc:
                raise DataError(f"{url} answered with non-JSON: {body[:500]!r}") from exc
            models = data.get("data") if isinstance(data, dict) else None
            if not models:
                raise DataError(f"{url} lists no models: {body[:500]!r}")
            return str(models[0]["id"])

        self._model = await retry_transient(once, policy=self.config.retry, rng=self._rng, what=f"GET {url}")
        return self._model

    # -- generation -------------------------------------------------------------------------------

    def build_body(self, request: TokenCompletionRequest, model: str) -> dict[str, Any]:
        """The ``/v1/completions`` JSON body for one request (public for inspection and tests)."""
        s = request.sampling
        body: dict[str, Any] = {
            "model": request.model or model,
            "prompt": list(request.prompt_token_ids),
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": -1 if s.top_k is None else s.top_k,
            "min_p": s.min_p,
            "frequency_penalty": s.frequency_penalty,
            "presence_penalty": s.presence_penalty,
            "repetition_penalty": s.repetition_penalty,
            "n": 1,
            "stream": False,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.stop_token_ids:
            body["stop_token_ids"] = list(s.stop_token_ids)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.return_.return_chosen_logprobs:
            # The sampled token is always included; k only adds alternatives we do not read.
            body["logprobs"] = 1
        if request.return_.return_prompt_logprobs:
            # 0: the prompt token's own logprob only, no alternatives.
            body["prompt_logprobs"] = 0
        ext = request.extensions.get("vllm", {}) if request.extensions else {}
        if not isinstance(ext, Mapping):
            raise ConfigError(f"extensions['vllm'] must be a mapping, got {type(ext).__name__}")
        unknown = sorted(set(ext) - VLLM_EXTENSION_KEYS)
        if unknown:
            raise ConfigError(
                f"extensions['vllm'] has unknown keys {unknown}; allowed: {sorted(VLLM_EXTENSION_KEYS)}"
            )
        for key, value in ext.items():
            if key == "extra_body":
                if not isinstance(value, Mapping):
                    raise ConfigError(f"extensions['vllm']['extra_body'] must be a mapping, got {value!r}")
                body.update(value)
            else:
                body[key] = value
        return body

    async def _post_completion(self, body: dict[str, Any]) -> tuple[dict[str, Any], Mapping[str, str]]:
        url = f"{self.base_url}/v1/completions"
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.config.connect_timeout_s, sock_read=self.config.request_timeout_s
        )

        async def exchange() -> tuple[int, str, dict[str, str]]:
            async with self._sessions.get().post(url, json=body, timeout=timeout) as resp:
                return resp.status, await resp.text(), dict(resp.headers)

        async def once() -> tuple[dict[str, Any], Mapping[str, str]]:
            status, text, headers = await with_deadline(
                exchange,
                deadline_s=self.config.request_timeout_s,
                what=f"POST {url}",
                setting="request_timeout_s",
            )
            if status >= 400:
                raise error_for_status(status, text, url, rejected=RequestRejectedError)
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise DataError(f"{url} answered with non-JSON: {text[:500]!r}") from exc
            return data, headers

        return await retry_transient(once, policy=self.config.retry, rng=self._rng, what=f"POST {url}")

    def _parse(
        self, request: TokenCompletionRequest, data: dict[str, Any], headers: Mapping[str, str], attempts: int
    ) -> ChatResponse:
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or len(choices) != 1:
            raise ProtocolError(f"expected exactly one choice from /v1/completions, got {choices!r:.500}")
        choice = choices[0]
        completion_ids = choice.get("token_ids")
        if completion_ids is None:
            raise ProtocolError(
                "the server returned no choices[0].token_ids; it must support return_token_ids (vLLM >= 0.10.2)"
            )
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != list(request.prompt_token_ids):
            raise ProtocolError(
                f"the server changed the prompt: sent {len(request.prompt_token_ids)} ids, it reports "
                f"{len(echoed)} ids that differ (prompt ids are canonical; is truncate_prompt_tokens set?)"
            )
        logprobs: list[float] | None = None
        if request.return_.return_chosen_logprobs:
            lp = choice.get("logprobs")
            token_logprobs = lp.get("token_logprobs") if isinstance(lp, dict) else None
            if token_logprobs is None:
                raise ProtocolError(
                    "logprobs were requested but choices[0].logprobs.token_logprobs is missing"
                )
            if len(token_logprobs) != len(completion_ids):
                raise ProtocolError(
                    f"{len(token_logprobs)} logprobs for {len(completion_ids)} completion tokens; they must match"
                )
            if any(v is None for v in token_logprobs):
                raise ProtocolError("the server returned a null logprob for a sampled token")
            logprobs = [float(v) for v in token_logprobs]
        prompt_logprobs: list[float] | None = None
        if request.return_.return_prompt_logprobs:
            prompt_logprobs = parse_prompt_logprobs(choice.get("prompt_logprobs"), request.prompt_token_ids)
        info: dict[str, Any] = {
            "backend": "vllm",
            "server": self.base_url,
            "attempts": attempts,
            "stop_reason": choice.get("stop_reason"),
        }
        if "usage" in data:
            info["usage"] = data["usage"]
        if "id" in data:
            info["request_id"] = data["id"]
        return ChatResponse(
            text=str(choice.get("text") or ""),
            prompt_token_ids=request.prompt_token_ids,
            completion_token_ids=completion_ids,
            completion_logprobs=logprobs,
            finish_reason=choice.get("finish_reason"),
            policy_version_start=_header_version(headers, HEADER_POLICY_VERSION_START),
            policy_version_end=_header_version(headers, HEADER_POLICY_VERSION),
            info=info,
            sampling_temperature=request.sampling.temperature,
            prompt_logprobs=prompt_logprobs,
        )

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        """Sample one completion for ``request.prompt_token_ids``."""
        model = request.model or await self.model_name()
        body = self.build_body(request, model)
        attempts = 0
        async with self._semaphore():
            while True:
                attempts += 1
                try:
                    data, headers = await self._post_completion(body)
                except LudicTimeoutError as exc:
                    raise LudicTimeoutError(
                        f"completion of a {len(request.prompt_token_ids)}-token prompt "
                        f"(max_tokens={request.sampling.max_tokens}) got no answer from {self.base_url} "
                        f"within request_timeout_s={self.config.request_timeout_s}"
                    ) from exc
                response = self._parse(request, data, headers, attempts)
                if (
                    response.finish_reason == "abort"
                    and self.config.retry_aborted
                    and attempts <= self.config.max_abort_retries
                ):
                    log.info("completion aborted by the server; resubmitting", attempt=attempts)
                    continue
                return response
