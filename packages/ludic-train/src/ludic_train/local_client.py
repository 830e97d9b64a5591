"""An in-process :class:`~ludic_core.inference.ChatClient` sampling from a transformers model.

It shares the trainer's model object, so one CPU or GPU can run generate-then-train with no server:
rollouts are sampled with the current weights, the trainer steps, and the next rollouts see the new
weights at once. Its policy version is the trainer step (the trainer reports each step through
:meth:`LocalPolicyClient.as_publisher`).

Concurrent requests are batched: the first request opens a short collection window
(``batch_window_s``), everything that arrives in it (up to ``max_batch_size``) is left-padded into one
batch and decoded together with a KV cache. Each request keeps its own sampling parameters, its own
``torch.Generator`` (seeded from the request's seed) and its own stop tokens. Batch composition depends
on arrival timing and nudges the numerics (a row's logits differ in the last bits between batches), so
only ``max_batch_size=1`` makes seeded sampling bit-reproducible across runs.

Logprobs are the chosen tokens' log-probabilities under ``softmax(logits / temperature)`` — after
temperature, before top-k / top-p / min-p filtering (the distribution a ratio-based loss recomputes).
At temperature 0 (greedy) they are the untempered log-probabilities.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import structlog

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.seeding import MAX_SEED
from ludic_core.types import ChatResponse

if TYPE_CHECKING:
    import torch

__all__ = ["LocalPolicyClient", "SharedWeightsPublisher"]

log = structlog.get_logger(__name__)

# Sampling fields this backend implements; the others must stay at their defaults (checked per request).
_UNSUPPORTED_SAMPLING = ("frequency_penalty", "presence_penalty", "repetition_penalty")


@attrs.define
class _Pending:
    request: TokenCompletionRequest
    future: asyncio.Future[ChatResponse]
    version_start: int


class LocalPolicyClient:
    """Sample from ``model`` in-process; a :class:`~ludic_core.inference.VersionedClient`.

    Args:
        model: a causal LM (``transformers`` or a PEFT wrapper of one). Shared, never copied.
        tokenizer: used to decode completion text and to match ``SamplingParams.stop`` strings; without
            one, ``text`` is empty and stop strings are rejected.
        eos_token_ids: token ids that end a completion with ``finish_reason="stop"`` (defaults to the
            model's ``generation_config.eos_token_id`` and the tokenizer's eos). Request
            ``stop_token_ids`` are added per request. The stop token is kept in the completion.
        pad_token_id: the id used for left padding (defaults to the tokenizer's pad, then eos).
        device: where inputs go (defaults to the model's parameters' device).
        batch_window_s: how long the first request waits for others to batch with.
        max_batch_size: the most requests decoded together.
        seed: seeds the generator used for requests that carry no seed.
        timeout_s: the longest a request may wait for its result (queueing included); ``None`` waits.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        eos_token_ids: Iterable[int] | None = None,
        pad_token_id: int | None = None,
        device: str | torch.device | None = None,
        batch_window_s: float = 0.005,
        max_batch_size: int = 64,
        seed: int = 0,
        timeout_s: float | None = 600.0,
        initial_version: int = 0,
    ) -> None:
        if batch_window_s < 0:
            raise ConfigError(f"LocalPolicyClient.batch_window_s must be >= 0, got {batch_window_s!r}")
        if max_batch_size < 1:
            raise ConfigError(f"LocalPolicyClient.max_batch_size must be >= 1, got {max_batch_size!r}")
        self.model = model
        self.tokenizer = tokenizer
        self._eos = self._resolve_eos(model, tokenizer, eos_token_ids)
        self._pad = self._resolve_pad(tokenizer, pad_token_id, self._eos)
        self._device = device
        self.batch_window_s = batch_window_s
        self.max_batch_size = max_batch_size
        self.timeout_s = timeout_s
        self._seed_rng = random.Random(seed)
        self._version = initial_version
        self._queue: list[_Pending] = []
        self._worker: asyncio.Task[None] | None = None
        self._compute_lock = asyncio.Lock()
        self.stats = {"requests": 0, "batches": 0, "generated_tokens": 0, "generate_s": 0.0}

    # --- versioning ---------------------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._version

    def set_policy_version(self, version: int) -> None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ConfigError(f"policy version must be an int >= 0, got {version!r}")
        self._version = version

    async def get_policy_version(self) -> int:
        return self._version

    def as_publisher(self) -> SharedWeightsPublisher:
        """A :class:`~ludic_train.publisher.PolicyPublisher` for the trainer: the weights are shared
        already, so publishing only moves the version to the trainer step."""
        return SharedWeightsPublisher(self)

    # --- ChatClient ---------------------------------------------------------------------------------

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        self._validate(request)
        loop = asyncio.get_running_loop()
        pending = _Pending(request=request, future=loop.create_future(), version_start=self._version)
        self._queue.append(pending)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        try:
            if self.timeout_s is None:
                return await asyncio.shield(pending.future)
            return await asyncio.wait_for(asyncio.shield(pending.future), self.timeout_s)
        except TimeoutError as exc:
            raise LudicTimeoutError(
                f"LocalPolicyClient: no completion within timeout_s={self.timeout_s} "
                f"(prompt of {len(request.prompt_token_ids)} tokens, max_tokens={request.sampling.max_tokens})"
            ) from exc

    async def aclose(self) -> None:
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        for p in self._queue:
            if not p.future.done():
                p.future.set_exception(TransportError("LocalPolicyClient closed before the request ran"))
        self._queue.clear()

    # --- batching -----------------------------------------------------------------------------------

    async def _drain(self) -> None:
        while self._queue:
            if self.batch_window_s > 0:
                await asyncio.sleep(self.batch_window_s)
            batch, self._queue = self._queue[: self.max_batch_size], self._queue[self.max_batch_size :]
            batch = [p for p in batch if not p.future.done()]
            if not batch:
                continue
            try:
                async with self._compute_lock:
                    t0 = time.perf_counter()
                    # Off the event loop: decoding is seconds of compute, and timeouts elsewhere must fire.
                    results = await asyncio.to_thread(self._generate, [p.request for p in batch])
                    self.stats["generate_s"] += time.perf_counter() - t0
            except Exception as exc:
                log.warning("local_client.generate_failed", error=repr(exc), batch=len(batch))
                err = TransportError(f"LocalPolicyClient generation failed: {type(exc).__name__}: {exc}")
                err.__cause__ = exc
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(err)
                continue
            self.stats["batches"] += 1
            self.stats["requests"] += len(batch)
            version_end = self._version
            for p, (ids, logps, reason) in zip(batch, results, strict=True):
                if p.future.done():
                    continue
                self.stats["generated_tokens"] += len(ids)
                want_logps = p.request.return_.return_chosen_logprobs
                p.future.set_result(
                    ChatResponse(
                        text=self._decode(ids),
                        prompt_token_ids=p.request.prompt_token_ids,
                        completion_token_ids=ids,
                        completion_logprobs=logps if want_logps else None,
                        finish_reason=reason,
                        policy_version_start=p.version_start,
                        policy_version_end=version_end,
                    )
                )

    # --- generation ---------------------------------------------------------------------------------

    def _generate(
        self, requests: Sequence[TokenCompletionRequest]
    ) -> list[tuple[list[int], list[float], str]]:
        import torch

        model = self.model
        device = torch.device(self._device) if self._device is not None else next(model.parameters()).device
        n = len(requests)
        prompt_lens = [len(r.prompt_token_ids) for r in requests]
        width = max(prompt_lens)
        input_ids = torch.full((n, width), self._pad, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(requests):
            input_ids[i, width - prompt_lens[i] :] = torch.tensor(r.prompt_token_ids, dtype=torch.long)
            attention[i, width - prompt_lens[i] :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)

        generators = []
        for r in requests:
            g = torch.Generator(device="cpu")
            g.manual_seed(r.seed if r.seed is not None else self._seed_rng.randint(0, MAX_SEED))
            generators.append(g)
        stop_ids = [set(self._eos) | set(r.sampling.stop_token_ids) for r in requests]
        max_new = [r.sampling.max_tokens for r in requests]

        outputs: list[list[int]] = [[] for _ in requests]
        logps: list[list[float]] = [[] for _ in requests]
        reasons: list[str | None] = [None] * n

        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                positions = (attention.cumsum(-1) - 1).clamp(min=0)
                out = model(
                    input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True
                )
                cache = out.past_key_values
                logits = out.logits[:, -1, :].float()
                next_pos = positions[:, -1:] + 1
                for _step in range(max(max_new)):
                    chosen = torch.full((n,), self._pad, dtype=torch.long)
                    for i, r in enumerate(requests):
                        if reasons[i] is not None:
                            continue
                        token, logp = _sample_row(logits[i], r, generators[i])
                        outputs[i].append(token)
                        logps[i].append(logp)
                        chosen[i] = token
                        if token in stop_ids[i] or self._hit_stop_string(outputs[i], r.sampling.stop):
                            reasons[i] = "stop"
                        elif len(outputs[i]) >= max_new[i]:
                            reasons[i] = "length"
                    if all(reason is not None for reason in reasons):
                        break
                    attention = torch.cat(
                        [attention, torch.ones((n, 1), dtype=attention.dtype, device=device)], 1
                    )
                    out = model(
                        input_ids=chosen.view(n, 1).to(device),
                        attention_mask=attention,
                        position_ids=next_pos,
                        past_key_values=cache,
                        use_cache=True,
                    )
                    cache = out.past_key_values
                    logits = out.logits[:, -1, :].float()
                    next_pos = next_pos + 1
        finally:
            model.train(was_training)
        return [(outputs[i], logps[i], reasons[i] or "length") for i in range(n)]

    def _hit_stop_string(self, ids: list[int], stops: tuple[str, ...]) -> bool:
        if not stops:
            return False
        # Only the tail can hold a new match: decode a window long enough for the longest stop string.
        window = self._decode(ids[-(max(len(s) for s in stops) + 8) :])
        return any(s in window for s in stops)

    def _decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return ""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    # --- validation ---------------------------------------------------------------------------------

    def _validate(self, request: TokenCompletionRequest) -> None:
        s = request.sampling
        for name in _UNSUPPORTED_SAMPLING:
            value, default = getattr(s, name), attrs.fields_dict(type(s))[name].default
            if value != default:
                raise ConfigError(
                    f"LocalPolicyClient does not implement SamplingParams.{name} (got {value!r}); "
                    f"leave it at {default!r}"
                )
        if s.stop and self.tokenizer is None:
            raise ConfigError(
                f"SamplingParams.stop={s.stop!r} needs a tokenizer; pass tokenizer= to LocalPolicyClient"
            )
        local = request.extensions.get("local")
        if local:
            raise ConfigError(
                f"LocalPolicyClient has no extension options; got extensions['local']={dict(local)!r}"
            )

    @staticmethod
    def _resolve_eos(model: Any, tokenizer: Any, eos_token_ids: Iterable[int] | None) -> tuple[int, ...]:
        if eos_token_ids is not None:
            return tuple(int(t) for t in eos_token_ids)
        found: list[int] = []
        gen_cfg = getattr(model, "generation_config", None)
        for source in (getattr(gen_cfg, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
            if source is None:
                continue
            found.extend([source] if isinstance(source, int) else list(source))
        if not found:
            raise ConfigError(
                "LocalPolicyClient: no eos token id found on the model's generation_config or the tokenizer; "
                "pass eos_token_ids="
            )
        return tuple(dict.fromkeys(int(t) for t in found))

    @staticmethod
    def _resolve_pad(tokenizer: Any, pad_token_id: int | None, eos: tuple[int, ...]) -> int:
        if pad_token_id is not None:
            return int(pad_token_id)
        pad = getattr(tokenizer, "pad_token_id", None)
        return int(pad) if pad is not None else eos[0]


def _sample_row(
    logits: torch.Tensor, request: TokenCompletionRequest, generator: torch.Generator
) -> tuple[int, float]:
    """Pick one token from a row of logits; return it and its logprob after temperature."""
    import torch

    s = request.sampling
    if s.temperature == 0:
        logprobs = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits).item())
        return token, float(logprobs[token].item())
    scaled = logits / s.temperature
    logprobs = torch.log_softmax(scaled, dim=-1)
    filtered = _filter_logits(scaled, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p)
    probs = torch.softmax(filtered, dim=-1).cpu()
    token = int(torch.multinomial(probs, 1, generator=generator).item())
    return token, float(logprobs[token].item())


def _filter_logits(logits: torch.Tensor, *, top_k: int | None, top_p: float, min_p: float) -> torch.Tensor:
    import torch

    out = logits
    if top_k is not None and top_k < out.numel():
        kth = torch.topk(out, top_k).values[-1]
        out = out.masked_fill(out < kth, float("-inf"))
    if min_p > 0:
        probs = torch.softmax(out, dim=-1)
        out = out.masked_fill(probs < min_p * probs.max(), float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


class SharedWeightsPublisher:
    """Publishes to a :class:`LocalPolicyClient` that shares the trainer's model: only the version moves.

    ``shares_trainer_weights`` tells the trainer to skip gathering (and LoRA-merging) the weights.
    """

    shares_trainer_weights = True

    def __init__(self, client: LocalPolicyClient) -> None:
        self.client = client

    async def publish(self, named_tensors: Mapping[str, Any], *, version: int) -> None:
        self.client.set_policy_version(version)

    async def aclose(self) -> None:
        return None
