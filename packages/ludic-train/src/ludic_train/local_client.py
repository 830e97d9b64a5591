"""An in-process :class:`~ludic_core.inference.ChatClient` sampling from a transformers model.

It shares the trainer's model object, so one CPU or GPU runs generate-then-train with no server; its
policy version is the trainer step (reported through :meth:`LocalPolicyClient.as_publisher`).
Concurrent requests (up to ``max_batch_size``) are decoded together with a KV cache; a batch is cut
once ``_QUIET_ITERATIONS`` event-loop iterations in a row bring no new request (``batch_window_s`` adds a
wall-clock wait), so batch membership follows event order, not machine speed. Each request keeps its own
sampling parameters, stop tokens and ``torch.Generator``; rows run in a canonical order, a shared prompt
prefix runs once, and prefill keeps only the last position's logits unless a request asks for prompt
logprobs. The same batch gives bit-identical tokens whatever the arrival order. Logprobs are taken after
temperature, before top-k/top-p/min-p filtering (untempered at temperature 0); prompt logprobs are
untempered float32. ``timeout_s`` bounds generation from the batch's start, ``queue_timeout_s`` the wait
before it. Batching, reproducibility and timeouts in detail: docs/packages/ludic-train.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.logs import get_logger
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S
from ludic_core.seeding import MAX_SEED
from ludic_core.types import ChatResponse
from ludic_core.validation import check_int
from ludic_train.grouped_attention import grouped_kv_attention
from ludic_train.growing_kv_cache import growing_kv_cache
from ludic_train.model_signature import forward_takes, unwrapped_model
from ludic_train.prefix_levels import plan_levels
from ludic_train.token_sampling import BatchSampler, chosen_logprobs

if TYPE_CHECKING:
    import torch

__all__ = ["LocalPolicyClient", "SharedWeightsPublisher"]

log = get_logger(__name__)

# Sampling fields this backend implements; the others must stay at their defaults (checked per request).
_UNSUPPORTED_SAMPLING = ("frequency_penalty", "presence_penalty", "repetition_penalty")

# A batch is cut after this many event-loop iterations in a row bring no new request. An episode that
# just got its completion needs a handful of iterations (future callbacks, task wake-ups, a semaphore
# hand-over) before it asks for the next one; each idle iteration costs microseconds.
_QUIET_ITERATIONS = 16


_Decoded = tuple[list[int], list[float], str, list[float] | None]
"""One request's result: completion ids, their logprobs, the finish reason, the prompt logprobs."""


@attrs.define
class _Pending:
    request: TokenCompletionRequest
    future: asyncio.Future[ChatResponse]
    # Resolves to the event-loop time at which the request's batch starts generating.
    started: asyncio.Future[float]
    version_start: int
    batch_size: int = 0


class LocalPolicyClient:
    """Sample from ``model`` in-process; a :class:`~ludic_core.inference.VersionedClient`.

    Args:
        model: a causal LM (``transformers`` or a PEFT wrapper of one). Shared, never copied.
        tokenizer: used to decode completion text and to match ``SamplingParams.stop`` strings; without
            one, ``text`` is empty and stop strings are rejected.
        eos_token_ids: token ids that end a completion with ``finish_reason="stop"`` (defaults to the
            model's ``generation_config.eos_token_id`` and the tokenizer's eos). Request
            ``stop_token_ids`` are added per request. The stop token is kept in the completion.
        pad_token_id: the id used for padding (defaults to the tokenizer's pad, then eos).
        device: where inputs go (defaults to the model's parameters' device).
        batch_window_s: seconds the first request of a batch waits for others before the batch is cut
            at the next quiet point of the event loop; 0 cuts by event order alone (reproducible).
        max_batch_size: the most requests decoded together.
        seed: seeds the generator used for requests that carry no seed.
        timeout_s: the longest a request's generation may take, counted from the moment its batch
            starts decoding (time spent queueing behind other batches is not counted); ``None`` waits.
        queue_timeout_s: the longest a request may wait in the queue for its batch to start; ``None``
            waits. A bound on a stuck or overloaded sampler, not on a slow one.
        share_prefix: run the token prefix shared by every prompt of a batch once and copy its KV cache
            to the rows (off: every row runs its whole prompt).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        eos_token_ids: Iterable[int] | None = None,
        pad_token_id: int | None = None,
        device: str | torch.device | None = None,
        batch_window_s: float = 0.0,
        max_batch_size: int = 64,
        seed: int = 0,
        timeout_s: float | None = DEFAULT_MODEL_CALL_TIMEOUT_S,
        queue_timeout_s: float | None = 3600.0,
        share_prefix: bool = True,
        initial_version: int = 0,
    ) -> None:
        if batch_window_s < 0:
            raise ConfigError(f"LocalPolicyClient.batch_window_s must be >= 0, got {batch_window_s!r}")
        if max_batch_size < 1:
            raise ConfigError(f"LocalPolicyClient.max_batch_size must be >= 1, got {max_batch_size!r}")
        for name, value in (("timeout_s", timeout_s), ("queue_timeout_s", queue_timeout_s)):
            if value is not None and not value > 0:
                raise ConfigError(f"LocalPolicyClient.{name} must be > 0 or None, got {value!r}")
        self.model = model
        self.tokenizer = tokenizer
        self._eos = self._resolve_eos(model, tokenizer, eos_token_ids)
        self._pad = self._resolve_pad(tokenizer, pad_token_id, self._eos)
        self._device = device
        self.batch_window_s = batch_window_s
        self.max_batch_size = max_batch_size
        self.timeout_s = timeout_s
        self.queue_timeout_s = queue_timeout_s
        self.share_prefix = share_prefix
        self._seed_rng = random.Random(seed)
        self._version = initial_version
        self._queue: list[_Pending] = []
        self._worker: asyncio.Task[None] | None = None
        self._compute_lock = asyncio.Lock()
        self._keeps_last_logits_only = forward_takes(model, "logits_to_keep")
        self._is_transformers_model = _is_transformers_model(model)
        self._cache_shareable: bool | None = None  # known after the first batch
        self.stats: dict[str, float] = {
            "requests": 0,
            "batches": 0,
            "generated_tokens": 0,
            "generate_s": 0.0,
            # Prompt tokens asked for, and those the model actually ran (shared prefixes and repeated
            # prompts run once per batch).
            "prompt_tokens": 0,
            "prefill_tokens": 0,
        }

    # --- versioning ---------------------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._version

    def set_policy_version(self, version: int) -> None:
        check_int("policy version", version, 0)
        self._version = version

    async def get_policy_version(self) -> int:
        return self._version

    def as_publisher(self) -> SharedWeightsPublisher:
        """A :class:`~ludic_core.publisher.PolicyPublisher` for the trainer: the weights are shared
        already, so publishing only moves the version to the trainer step."""
        return SharedWeightsPublisher(self)

    # --- ChatClient ---------------------------------------------------------------------------------

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        self._validate(request)
        loop = asyncio.get_running_loop()
        pending = _Pending(
            request=request,
            future=loop.create_future(),
            started=loop.create_future(),
            version_start=self._version,
        )
        self._queue.append(pending)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        try:
            return await self._await_result(pending)
        finally:
            # The caller is gone (timed out or cancelled): a queued request is skipped, a running
            # one's result dropped.
            if not pending.future.done():
                pending.future.cancel()

    async def _await_result(self, pending: _Pending) -> ChatResponse:
        loop = asyncio.get_running_loop()
        request = pending.request
        what = f"prompt of {len(request.prompt_token_ids)} tokens, max_tokens={request.sampling.max_tokens}"
        if not pending.started.done():
            # asyncio.wait leaves both futures running on timeout; a failure before the start (aclose)
            # resolves `future` without `started`.
            waiters: set[asyncio.Future[Any]] = {pending.started, pending.future}
            done, _ = await asyncio.wait(
                waiters, timeout=self.queue_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                raise LudicTimeoutError(
                    f"LocalPolicyClient: request still queued after queue_timeout_s={self.queue_timeout_s} "
                    f"({len(self._queue)} requests queued, a batch at most max_batch_size="
                    f"{self.max_batch_size}; {what})"
                )
        if pending.future.done() or self.timeout_s is None:
            return await asyncio.shield(pending.future)
        remaining = self.timeout_s - (loop.time() - pending.started.result())
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), max(remaining, 0.0))
        except TimeoutError as exc:
            if pending.future.done():  # finished as the timer fired, or failed with a TimeoutError
                return pending.future.result()
            raise LudicTimeoutError(
                f"LocalPolicyClient: generation not finished within timeout_s={self.timeout_s} after its "
                f"batch of {pending.batch_size} requests started ({what})"
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

    async def _collect(self) -> None:
        """Wait until the queue holds a full batch or the event loop has gone quiet."""
        if self.batch_window_s > 0 and len(self._queue) < self.max_batch_size:
            await asyncio.sleep(self.batch_window_s)
        quiet, size = 0, len(self._queue)
        while quiet < _QUIET_ITERATIONS and size < self.max_batch_size:
            await asyncio.sleep(0)  # one event-loop iteration: every callback ready now runs
            quiet, size = (quiet + 1, size) if len(self._queue) == size else (0, len(self._queue))

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Also after each batch: its requests' episodes step and ask again before the next cut.
            await self._collect()
            if not self._queue:
                return
            live = [p for p in self._queue if not p.future.done()]
            batch, self._queue = live[: self.max_batch_size], live[self.max_batch_size :]
            if not batch:
                continue
            try:
                async with self._compute_lock:
                    now = loop.time()
                    for p in batch:
                        p.batch_size = len(batch)
                        if not p.started.done():
                            p.started.set_result(now)
                    t0 = time.perf_counter()
                    # Off the event loop: decoding is seconds of compute, and timeouts elsewhere must fire.
                    results = await asyncio.to_thread(self._generate, [p.request for p in batch])
                    self.stats["generate_s"] += time.perf_counter() - t0
            except asyncio.CancelledError:  # aclose() while a batch decodes
                _fail(batch, TransportError("LocalPolicyClient closed while the request ran"))
                raise
            except Exception as exc:
                log.warning("local_client.generate_failed", error=repr(exc), batch=len(batch))
                _fail(
                    batch,
                    TransportError(f"LocalPolicyClient generation failed: {type(exc).__name__}: {exc}"),
                    exc,
                )
                continue
            self.stats["batches"] += 1
            self.stats["requests"] += len(batch)
            try:
                self._deliver(batch, results)
            except Exception as exc:  # a bug here must reach the callers now, not at their timeout
                _fail(
                    batch,
                    TransportError(f"LocalPolicyClient failed to deliver: {type(exc).__name__}: {exc}"),
                    exc,
                )

    def _deliver(self, batch: Sequence[_Pending], results: Sequence[_Decoded]) -> None:
        version_end = self._version
        for p, (ids, logps, reason, prompt_logps) in zip(batch, results, strict=True):
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
                    # The logprobs are under softmax(logits / temperature), untempered at 0.
                    sampling_temperature=p.request.sampling.temperature,
                    prompt_logprobs=prompt_logps,
                )
            )

    # --- generation ---------------------------------------------------------------------------------

    def _generate(self, requests: Sequence[TokenCompletionRequest]) -> list[_Decoded]:
        """Decode ``requests`` as one batch; results in the order of ``requests``."""
        order = sorted(range(len(requests)), key=lambda i: _canonical_key(requests[i]))
        decoded = self._generate_canonical([requests[i] for i in order])
        results: list[_Decoded] = [([], [], "length", None)] * len(requests)
        for row, i in enumerate(order):
            results[i] = decoded[row]
        return results

    def _generate_canonical(self, requests: Sequence[TokenCompletionRequest]) -> list[_Decoded]:
        import torch

        model = self.model
        device = torch.device(self._device) if self._device is not None else next(model.parameters()).device
        n = len(requests)
        # Unseeded requests draw their seeds in canonical order, so a batch's seeds do not depend on
        # arrival order either.
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
            # no_grad, not inference_mode: a buffer a forward pass rebuilds (dynamic RoPE) would become
            # an inference tensor and break the trainer's next backward pass through the shared model.
            # Grouped-query attention reads the shared key/value heads without copying them per query
            # head (same outputs; see ludic_train.grouped_attention).
            with torch.no_grad(), grouped_kv_attention(model):
                want_prompt_logps = [r.return_.return_prompt_logprobs for r in requests]
                cache, logits, attention, next_pos, prompt_logps = self._prefill(
                    [r.prompt_token_ids for r in requests],
                    device,
                    prompt_logprobs=any(want_prompt_logps),
                    reserve=max(max_new),
                )
                sampler = BatchSampler(requests, generators, device)
                # Rows leave the batch when they finish, where the cache can be re-indexed.
                prunable = _can_copy_rows(cache)
                rows = list(range(n))  # the request behind each row of the batch
                for _step in range(max(max_new)):
                    tokens, chosen_logps = sampler.sample(logits)
                    for j, i in enumerate(rows):
                        if reasons[i] is not None:
                            continue
                        token = tokens[j]
                        outputs[i].append(token)
                        logps[i].append(chosen_logps[j])
                        if token in stop_ids[i] or self._hit_stop_string(
                            outputs[i], requests[i].sampling.stop
                        ):
                            reasons[i] = "stop"
                        elif len(outputs[i]) >= max_new[i]:
                            reasons[i] = "length"
                    keep = [j for j, i in enumerate(rows) if reasons[i] is None]
                    if not keep:
                        break
                    if prunable and len(keep) < len(rows):
                        index = torch.tensor(keep, dtype=torch.long, device=device)
                        cache.batch_select_indices(index)
                        attention, next_pos = attention[index], next_pos[index]
                        sampler.select(keep)
                        rows, tokens = [rows[j] for j in keep], [tokens[j] for j in keep]
                    chosen = [
                        t if reasons[i] is None else self._pad for t, i in zip(tokens, rows, strict=True)
                    ]
                    attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=1)
                    logits, _, cache = self._forward_last(
                        input_ids=torch.tensor(chosen, dtype=torch.long, device=device).view(-1, 1),
                        attention_mask=attention,
                        position_ids=next_pos,
                        past_key_values=cache,
                    )
                    next_pos = next_pos + 1
        finally:
            model.train(was_training)
        return [
            (
                outputs[i],
                logps[i],
                reasons[i] or "length",
                prompt_logps[i] if prompt_logps is not None and want_prompt_logps[i] else None,
            )
            for i in range(n)
        ]

    def _prefill(
        self, prompts: Sequence[Sequence[int]], device: torch.device, *, prompt_logprobs: bool, reserve: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, list[list[float]] | None]:
        """Run the prompts; return the KV cache (with room for ``reserve`` more tokens per row), the
        last position's float32 logits per row, the attention mask so far, the next position id per
        row and, when ``prompt_logprobs``, each prompt's logprobs (one per token after the first)."""
        self.stats["prompt_tokens"] += sum(len(p) for p in prompts)
        if self.share_prefix and self._cache_shareable is not False and len(prompts) > 1:
            shared = self._prefill_shared(prompts, device, prompt_logprobs=prompt_logprobs, reserve=reserve)
            if shared is not None:
                self._cache_shareable = True
                return shared
            # Not a transformers Cache (a remote-code model, say): rows cannot share one, so from now
            # on every row runs its whole prompt.
            self._cache_shareable = False
            log.info(
                "local_client.prompt_sharing_off", reason="the model's KV cache cannot be copied to rows"
            )
        scores: list[list[float]] | None = [[] for _ in prompts] if prompt_logprobs else None
        cache, logits, attention, next_pos = self._prefill_rows(
            prompts, device, prefix=0, cache=self._empty_cache(reserve), scores=scores
        )
        return cache, logits, attention, next_pos, scores

    def _empty_cache(self, reserve: int) -> Any:
        """For a transformers model, an empty KV cache that decodes without copying itself at every
        token, with room for ``reserve`` generated tokens; otherwise ``None`` (the model makes its own)."""
        return growing_kv_cache(self.model.config, reserve=reserve) if self._is_transformers_model else None

    def _prefill_shared(
        self, prompts: Sequence[Sequence[int]], device: torch.device, *, prompt_logprobs: bool, reserve: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, list[list[float]] | None] | None:
        """Run each distinct prompt once, and each prefix that several of them share once (in the
        levels :func:`plan_levels` picks); ``None`` when the model's cache cannot be copied between
        rows."""
        import torch

        first: dict[tuple[int, ...], int] = {}
        which = [first.setdefault(tuple(p), len(first)) for p in prompts]
        unique = list(first)
        scores: list[list[float]] | None = [[] for _ in unique] if prompt_logprobs else None
        cache = self._empty_cache(reserve)
        start = 0
        rows_before: list[int] = []  # the row of the previous level each prompt continues
        for cut, rows in plan_levels(unique):
            # One row per distinct prefix of length `cut`: its tokens from `start` on, no padding.
            members: list[int] = []  # the first prompt of each row (rows are numbered in that order)
            for u, row in enumerate(rows):
                if row == len(members):
                    members.append(u)
            if rows_before:  # a level after the first: its rows continue the previous level's
                cache.batch_select_indices(
                    torch.tensor([rows_before[u] for u in members], dtype=torch.long, device=device)
                )
            ids = torch.tensor([list(unique[u][start:cut]) for u in members], dtype=torch.long, device=device)
            _, every, cache = self._forward_last(
                input_ids=ids,
                attention_mask=torch.ones((len(members), cut), dtype=torch.long, device=device),
                position_ids=torch.arange(start, cut, device=device).repeat(len(members), 1),
                past_key_values=cache,
                all_positions=scores is not None,
            )
            if scores is not None and every is not None:
                # Positions start..cut-1 of a row score tokens start+1..cut of each prompt it carries;
                # the prompts of a row agree up to `cut - 1` but may differ at `cut`.
                for u, row in enumerate(rows):
                    scores[u].extend(chosen_logprobs(every[row], unique[u][start + 1 : cut + 1]))
            self.stats["prefill_tokens"] += ids.numel()
            if not _can_copy_rows(cache):
                return None
            rows_before, start = rows, cut
        if rows_before:
            cache.batch_select_indices(torch.tensor(rows_before, dtype=torch.long, device=device))
        cache, logits, attention, next_pos = self._prefill_rows(
            unique, device, prefix=start, cache=cache, scores=scores
        )
        if not _can_copy_rows(cache):
            return None
        if len(unique) < len(prompts):
            index = torch.tensor(which, dtype=torch.long, device=device)
            cache.batch_select_indices(index)
            logits, attention, next_pos = logits[index], attention[index], next_pos[index]
        return cache, logits, attention, next_pos, None if scores is None else [scores[w] for w in which]

    def _prefill_rows(
        self,
        prompts: Sequence[Sequence[int]],
        device: torch.device,
        *,
        prefix: int,
        cache: Any,
        scores: list[list[float]] | None = None,
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run each prompt after its first ``prefix`` tokens, which ``cache`` holds already (one row
        per prompt); with ``scores``, append to ``scores[i]`` the logprobs of prompt ``i``'s tokens
        after ``prefix + 1``."""
        import torch

        n = len(prompts)
        lengths = [len(p) - prefix for p in prompts]
        width = max(lengths)
        # Layout per row: [shared prefix][pads][own suffix]; the pads are masked and positions skip them.
        input_ids = torch.full((n, width), self._pad, dtype=torch.long)
        attention = torch.zeros((n, prefix + width), dtype=torch.long)
        attention[:, :prefix] = 1
        for i, p in enumerate(prompts):
            input_ids[i, width - lengths[i] :] = torch.tensor(p[prefix:], dtype=torch.long)
            attention[i, prefix + width - lengths[i] :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, prefix:]
        self.stats["prefill_tokens"] += sum(lengths)
        logits, every, cache = self._forward_last(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            all_positions=scores is not None,
        )
        if scores is not None and every is not None:
            for i, p in enumerate(prompts):
                # Row i holds its suffix in the last lengths[i] columns; the last one scores the
                # completion, the ones before it the prompt's next tokens.
                rows = every[i, width - lengths[i] : width - 1]
                scores[i].extend(chosen_logprobs(rows, p[prefix + 1 :]))
        return cache, logits, attention, positions[:, -1:] + 1

    def _forward_last(
        self, *, all_positions: bool = False, **inputs: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
        """One forward pass: the last position's logits in float32, the logits of every position when
        ``all_positions`` (else ``None``), and the KV cache."""
        extra = {"logits_to_keep": 1} if self._keeps_last_logits_only and not all_positions else {}
        out = self.model(**inputs, use_cache=True, **extra)
        return out.logits[:, -1, :].float(), out.logits if all_positions else None, out.past_key_values

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


def _canonical_key(request: TokenCompletionRequest) -> tuple[Any, ...]:
    s = request.sampling
    return (
        request.seed is None,
        request.seed if request.seed is not None else 0,
        request.prompt_token_ids,
        s.temperature,
        s.top_k if s.top_k is not None else 0,
        s.top_p,
        s.min_p,
        s.max_tokens,
        s.stop_token_ids,
        s.stop,
    )


def _fail(batch: Sequence[_Pending], error: TransportError, cause: BaseException | None = None) -> None:
    """Fail every request of ``batch`` still waiting with ``error`` (caused by ``cause``)."""
    error.__cause__ = cause
    for p in batch:
        if not p.future.done():
            p.future.set_exception(error)


def _is_transformers_model(model: Any) -> bool:
    """Whether ``model`` (or the model a PEFT wrapper holds) is a transformers ``PreTrainedModel``."""
    from transformers import PreTrainedModel

    return isinstance(unwrapped_model(model), PreTrainedModel)


def _can_copy_rows(cache: Any) -> bool:
    """Whether a KV cache can be repeated and re-indexed along the batch (a transformers ``Cache``)."""
    return hasattr(cache, "batch_repeat_interleave") and hasattr(cache, "batch_select_indices")


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
