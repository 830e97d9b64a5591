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
import bisect
import contextlib
import itertools
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
from ludic_train.model_signature import forward_takes

if TYPE_CHECKING:
    import torch

__all__ = ["LocalPolicyClient", "SharedWeightsPublisher"]

log = get_logger(__name__)

# Sampling fields this backend implements; the others must stay at their defaults (checked per request).
_UNSUPPORTED_SAMPLING = ("frequency_penalty", "presence_penalty", "repetition_penalty")

# Prompt sharing (see _plan_levels): at most this many levels of shared prefixes, each counted as this
# many extra prompt tokens (one more forward pass and a copy of the KV cache rows).
_MAX_LEVELS = 4
_LEVEL_COST_TOKENS = 16

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
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(
                            TransportError("LocalPolicyClient closed while the request ran")
                        )
                raise
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
            with torch.no_grad():
                want_prompt_logps = [r.return_.return_prompt_logprobs for r in requests]
                cache, logits, attention, next_pos, prompt_logps = self._prefill(
                    [r.prompt_token_ids for r in requests], device, prompt_logprobs=any(want_prompt_logps)
                )
                sampler = _BatchSampler(requests, generators, device)
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
        self, prompts: Sequence[Sequence[int]], device: torch.device, *, prompt_logprobs: bool
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, list[list[float]] | None]:
        """Run the prompts; return the KV cache, the last position's float32 logits per row, the
        attention mask so far, the next position id per row and, when ``prompt_logprobs``, each
        prompt's logprobs (one per token after the first)."""
        self.stats["prompt_tokens"] += sum(len(p) for p in prompts)
        if self.share_prefix and self._cache_shareable is not False and len(prompts) > 1:
            shared = self._prefill_shared(prompts, device, prompt_logprobs=prompt_logprobs)
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
            prompts, device, prefix=0, cache=None, scores=scores
        )
        return cache, logits, attention, next_pos, scores

    def _prefill_shared(
        self, prompts: Sequence[Sequence[int]], device: torch.device, *, prompt_logprobs: bool
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, list[list[float]] | None] | None:
        """Run each distinct prompt once, and each prefix that several of them share once (in the
        levels :func:`_plan_levels` picks); ``None`` when the model's cache cannot be copied between
        rows."""
        import torch

        first: dict[tuple[int, ...], int] = {}
        which = [first.setdefault(tuple(p), len(first)) for p in prompts]
        unique = list(first)
        scores: list[list[float]] | None = [[] for _ in unique] if prompt_logprobs else None
        cache: Any = None
        start = 0
        rows_before: list[int] = []  # the row of the previous level each prompt continues
        for cut, rows in _plan_levels(unique):
            # One row per distinct prefix of length `cut`: its tokens from `start` on, no padding.
            members: list[int] = []  # the first prompt of each row (rows are numbered in that order)
            for u, row in enumerate(rows):
                if row == len(members):
                    members.append(u)
            if cache is not None:
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
                    scores[u].extend(_chosen_logprobs(every[row], unique[u][start + 1 : cut + 1]))
            self.stats["prefill_tokens"] += ids.numel()
            if not _can_copy_rows(cache):
                return None
            rows_before, start = rows, cut
        if cache is not None:
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
                scores[i].extend(_chosen_logprobs(rows, p[prefix + 1 :]))
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


def _chosen_logprobs(logits: torch.Tensor, targets: Sequence[int]) -> list[float]:
    """``log_softmax(logits[k])[targets[k]]`` for each row ``k`` of ``[len(targets), V]`` logits, in float32."""
    import torch

    if not targets:
        return []
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(list(targets), dtype=torch.long, device=logits.device)[:, None]
    return [float(x) for x in logprobs.gather(-1, index).squeeze(-1).tolist()]


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


def _plan_levels(prompts: Sequence[tuple[int, ...]]) -> list[tuple[int, list[int]]]:
    """How to run the prefixes that distinct ``prompts`` share: a list of levels ``(cut, rows)``.

    Level ``l`` runs tokens ``[cut_{l-1}, cut_l)`` once per distinct prefix of length ``cut_l``
    (``rows[i]``: the row of prompt ``i``, rows numbered in order of first appearance); every prompt then
    runs its own tokens from the last cut on. Cuts are the same positions for every prompt, so a level
    needs no padding, and they stop short of the shortest prompt, so every prompt keeps a last position
    of its own. The cuts minimise the tokens run, each level counted ``_LEVEL_COST_TOKENS`` extra (its
    forward pass and KV-cache copy); no level at all when sharing saves nothing.
    """
    n = len(prompts)
    if n < 2:
        return []
    order = sorted(range(n), key=prompts.__getitem__)
    # Lexicographic neighbours: prompts i and j share a prefix of length c iff every neighbour pair
    # between them does.
    lcps = [_common_len(prompts[a], prompts[b]) for a, b in itertools.pairwise(order)]
    shortest, longest = min(len(p) for p in prompts), max(len(p) for p in prompts)
    # The number of distinct prefixes of length c only grows just past a neighbour LCP, so the best cut
    # positions are those LCPs.
    candidates = sorted({min(c, shortest - 1) for c in lcps} - {0})
    if not candidates:
        return []
    sorted_lcps = sorted(lcps)
    distinct = [1 + bisect.bisect_left(sorted_lcps, c) for c in candidates]
    inf = float("inf")
    # cost[k][j]: tokens run by k levels, the last cut at candidates[j]; back[k][j]: the cut before it.
    cost = [[inf] * len(candidates) for _ in range(_MAX_LEVELS + 1)]
    back = [[-1] * len(candidates) for _ in range(_MAX_LEVELS + 1)]
    for j, c in enumerate(candidates):
        cost[1][j] = distinct[j] * c + _LEVEL_COST_TOKENS
    for k in range(2, _MAX_LEVELS + 1):
        for j, c in enumerate(candidates):
            for i in range(j):
                value = cost[k - 1][i] + distinct[j] * (c - candidates[i]) + _LEVEL_COST_TOKENS
                if value < cost[k][j]:
                    cost[k][j], back[k][j] = value, i
    best, best_k, best_j = float(n * longest), 0, -1  # no levels: every prompt runs whole
    for k in range(1, _MAX_LEVELS + 1):
        for j, c in enumerate(candidates):
            value = cost[k][j] + n * (longest - c)
            if value < best:
                best, best_k, best_j = value, k, j
    cuts: list[int] = []
    while best_k > 0:
        cuts.append(candidates[best_j])
        best_j, best_k = back[best_k][best_j], best_k - 1
    levels = []
    for cut in reversed(cuts):
        rows = [0] * n
        row = 0
        for position, i in enumerate(order):
            if position and lcps[position - 1] < cut:
                row += 1
            rows[i] = row
        # Renumber rows by first appearance in `prompts` order, so that level batches follow it.
        renumber = {r: k for k, r in enumerate(dict.fromkeys(rows))}
        levels.append((cut, [renumber[r] for r in rows]))
    return levels


def _common_len(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _can_copy_rows(cache: Any) -> bool:
    """Whether a KV cache can be repeated and re-indexed along the batch (a transformers ``Cache``)."""
    return hasattr(cache, "batch_repeat_interleave") and hasattr(cache, "batch_select_indices")


class _BatchSampler:
    """Picks one token per row of a decode step, all rows at once.

    Greedy rows (temperature 0) take the argmax. Sampled rows scale by their temperature, apply their
    top-k / min-p / top-p filters (only rows that set one pay for it) and invert their cumulative
    distribution at one uniform number drawn from their own generator: a request's random stream is one
    draw per token, whatever else shares the batch.
    """

    def __init__(
        self,
        requests: Sequence[TokenCompletionRequest],
        generators: Sequence[torch.Generator],
        device: torch.device,
    ) -> None:
        self._device = device
        self._requests = list(requests)
        self._generators = list(generators)
        self._refresh()

    def select(self, keep: Sequence[int]) -> None:
        """Keep only these rows (positions in the current batch), in this order."""
        self._requests = [self._requests[j] for j in keep]
        self._generators = [self._generators[j] for j in keep]
        self._refresh()

    def _refresh(self) -> None:
        import torch

        sampling = [r.sampling for r in self._requests]
        temps = [s.temperature for s in sampling]
        self._sampled = [j for j, t in enumerate(temps) if t > 0]
        self._all_sampled = len(self._sampled) == len(temps)
        # Greedy rows keep their untempered logits (their logprobs are untempered).
        self._unit_temps = all(t in (0.0, 1.0) for t in temps)
        self._temps = torch.tensor([t if t > 0 else 1.0 for t in temps], device=self._device)
        rows = [sampling[j] for j in self._sampled]
        self._top_k = [s.top_k or 0 for s in rows]
        self._top_p = [s.top_p for s in rows]
        self._min_p = [s.min_p for s in rows]
        self._sampled_index = torch.tensor(self._sampled, dtype=torch.long, device=self._device)
        greedy = [j for j, t in enumerate(temps) if t == 0]
        self._greedy_index = torch.tensor(greedy, dtype=torch.long, device=self._device)

    def sample(self, logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """``logits``: ``[rows, vocab]`` float32. Returns each row's token and its logprob."""
        import torch

        scaled = logits if self._unit_temps else logits / self._temps[:, None]
        logprobs = torch.log_softmax(scaled, dim=-1)
        if not self._sampled:
            tokens = torch.argmax(logits, dim=-1)
        else:
            rows = scaled if self._all_sampled else scaled[self._sampled_index]
            filtered = _filter_rows(rows, top_k=self._top_k, top_p=self._top_p, min_p=self._min_p)
            if filtered is not None:
                probs = torch.softmax(filtered, dim=-1)
            else:
                probs = (logprobs if self._all_sampled else logprobs[self._sampled_index]).exp()
            uniforms = torch.cat(
                [torch.rand(1, generator=self._generators[j], dtype=torch.float64) for j in self._sampled]
            )
            picked = _inverse_cdf(probs, uniforms.to(probs.device))
            if self._all_sampled:
                tokens = picked
            else:
                tokens = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
                tokens[self._sampled_index] = picked
                tokens[self._greedy_index] = torch.argmax(logits[self._greedy_index], dim=-1)
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
        return [int(t) for t in tokens.tolist()], [float(x) for x in chosen.tolist()]


# Tokens per block of the two-level inverse CDF.
_CDF_BLOCK = 256


def _inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row of non-negative ``weights``, the first index whose cumulative weight exceeds
    ``uniform × total``: a draw from the normalised weights, never of a zero-weight index.

    Two levels, because a float32 running sum over a 50k vocabulary rounds away the mass of tail tokens
    and a float64 one costs several passes over the logits: per-block sums in float32 (each exact to a
    few ulps of its block's own mass), their running sum in float64, then a float64 running sum inside
    the chosen block only.
    """
    import torch

    rows, vocab = weights.shape
    if vocab % _CDF_BLOCK:
        weights = torch.nn.functional.pad(weights, (0, _CDF_BLOCK - vocab % _CDF_BLOCK))
    blocks = weights.contiguous().view(rows, -1, _CDF_BLOCK)
    block_cdf = blocks.sum(-1).double().cumsum_(-1)
    targets = uniforms * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, targets[:, None], right=True).squeeze(1)
    block = block.clamp_(max=block_cdf.shape[1] - 1)
    before = block_cdf.gather(1, (block - 1).clamp(min=0)[:, None]).squeeze(1).masked_fill_(block == 0, 0.0)
    inner = blocks[torch.arange(rows, device=weights.device), block].double().cumsum_(-1)
    index = torch.searchsorted(inner, (targets - before)[:, None], right=True).squeeze(1)
    # The block sum and this running sum round differently; a target past the block's running total
    # takes the block's last token of positive weight, never a zero-weight one after it.
    last = (inner < inner[:, -1:]).sum(-1)
    return block * _CDF_BLOCK + torch.minimum(index, last)


def _filter_rows(
    logits: torch.Tensor, *, top_k: Sequence[int], top_p: Sequence[float], min_p: Sequence[float]
) -> torch.Tensor | None:
    """Top-k, then min-p, then top-p per row (``top_k`` 0: off); ``None`` when no row filters."""
    import torch

    vocab = logits.shape[-1]
    ks = [k if 0 < k < vocab else 0 for k in top_k]
    use_k, use_min_p, use_top_p = any(ks), any(m > 0 for m in min_p), any(p < 1.0 for p in top_p)
    if not (use_k or use_min_p or use_top_p):
        return None
    out = logits
    neg_inf = float("-inf")
    if use_k:
        k = torch.tensor(ks, device=out.device)
        kth = torch.topk(out, max(ks), dim=-1).values.gather(1, (k - 1).clamp(min=0)[:, None])
        kth = torch.where(k[:, None] > 0, kth, torch.full_like(kth, neg_inf))
        out = out.masked_fill(out < kth, neg_inf)
    if use_min_p:
        probs = torch.softmax(out, dim=-1)
        floor = torch.tensor(min_p, dtype=probs.dtype, device=out.device)[:, None] * probs.amax(
            -1, keepdim=True
        )
        out = out.masked_fill(probs < floor, neg_inf)
    if use_top_p:
        sorted_logits, order = torch.sort(out, descending=True, dim=-1)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Rows without top-p never drop (their mass before a tail token can round up to 1.0).
        threshold = torch.tensor([p if p < 1.0 else float("inf") for p in top_p], device=out.device)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= threshold[:, None]
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        out = out.masked_fill(drop, neg_inf)
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
