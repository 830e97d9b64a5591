"""LocalPolicyClient against a tiny real model."""

from __future__ import annotations

import asyncio
import random
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ludic_core.errors import ConfigError, LudicTimeoutError, TransportError
from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.testing import check_client
from ludic_train.local_client import LocalPolicyClient
from ludic_train.prefix_levels import plan_levels
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.token_sampling import BatchSampler, filter_rows, inverse_cdf


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return bpe_tokenizer()


@pytest.fixture
def model(tok):  # type: ignore[no-untyped-def]
    return tiny_causal_lm(tok, seed=0)


def req(tok, text: str, *, seed: int | None = 0, **sampling) -> TokenCompletionRequest:  # type: ignore[no-untyped-def]
    return TokenCompletionRequest(
        prompt_token_ids=tok.encode(text),
        sampling=SamplingParams(**{"temperature": 1.0, "max_tokens": 8, **sampling}),
        return_=ReturnSpec.for_rl(),
        seed=seed,
    )


def reference_logprobs(model, prompt, completion, temperature: float) -> list[float]:  # type: ignore[no-untyped-def]
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, -1)
    return [logp[len(prompt) - 1 + j, t].item() for j, t in enumerate(completion)]


async def test_concurrent_requests_are_batched_and_logprobs_match_a_full_forward(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok, batch_window_s=0.02)
    prompts = ["hello", "Natalia has 48 clips and more words here", "Board:", "x" * 30]
    responses = await asyncio.gather(
        *[client.complete_tokens(req(tok, p, seed=i, temperature=0.7)) for i, p in enumerate(prompts)]
    )
    assert client.stats["batches"] == 1 and client.stats["requests"] == 4
    for r in responses:
        assert len(r.completion_token_ids) == 8 and r.finish_reason == "length"
        ref = reference_logprobs(model, r.prompt_token_ids, r.completion_token_ids, 0.7)
        assert r.completion_logprobs == pytest.approx(ref, abs=1e-4)
        assert r.policy_version == 0


async def test_unbatched_sampling_is_bit_reproducible_whatever_the_arrival_order(tok, model) -> None:  # type: ignore[no-untyped-def]
    prompts = ["hello", "Natalia has 48 clips", "Board: X . O", "x" * 20, "a b c d e f"]

    async def run(jitter_seed: int) -> list[tuple[tuple[int, ...], tuple[float, ...] | None]]:
        client = LocalPolicyClient(model, tok, max_batch_size=1)
        jitter = random.Random(jitter_seed)

        async def one(i: int, prompt: str) -> tuple[tuple[int, ...], tuple[float, ...] | None]:
            await asyncio.sleep(jitter.random() * 0.02)  # a different arrival order on every run
            r = await client.complete_tokens(req(tok, prompt, seed=10 + i, max_tokens=12))
            return r.completion_token_ids, r.completion_logprobs

        results = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        assert client.stats["batches"] == len(prompts)
        return results

    first = await run(0)
    for jitter_seed in (1, 2):
        assert await run(jitter_seed) == first  # exact equality, logprobs included


async def test_same_seed_same_completion_different_seed_differs(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok)
    a = await client.complete_tokens(req(tok, "hello", seed=5, max_tokens=16))
    b = await client.complete_tokens(req(tok, "hello", seed=5, max_tokens=16))
    c = await client.complete_tokens(req(tok, "hello", seed=6, max_tokens=16))
    assert a.completion_token_ids == b.completion_token_ids
    assert a.completion_token_ids != c.completion_token_ids


async def test_greedy_matches_transformers_generate(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok, eos_token_ids=[10**6])  # no stop: compare all 10 tokens
    r = await client.complete_tokens(req(tok, "Natalia has", temperature=0.0, max_tokens=10))
    prompt = torch.tensor([list(r.prompt_token_ids)])
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        max_new_tokens=10,
        min_new_tokens=10,
        pad_token_id=tok.pad_token_id,
    )
    assert list(r.completion_token_ids) == out[0, prompt.shape[1] :].tolist()


async def test_stop_token_ends_with_stop_and_is_kept(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok)
    free = await client.complete_tokens(req(tok, "hello", seed=1, max_tokens=12))
    stop_id = free.completion_token_ids[3]
    first = free.completion_token_ids.index(stop_id)
    stopped = await client.complete_tokens(req(tok, "hello", seed=1, max_tokens=12, stop_token_ids=[stop_id]))
    assert stopped.finish_reason == "stop"
    assert stopped.completion_token_ids == free.completion_token_ids[: first + 1]


async def test_stop_string(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok)
    free = await client.complete_tokens(req(tok, "hello", seed=2, max_tokens=12))
    stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 2]
    assume = stop.strip()
    if not assume:
        pytest.skip("sampled text has only whitespace in the middle")
    stopped = await client.complete_tokens(req(tok, "hello", seed=2, max_tokens=12, stop=[stop]))
    assert stopped.finish_reason == "stop" and stop in stopped.text
    assert len(stopped.completion_token_ids) < len(free.completion_token_ids)


async def test_version_moves_with_the_publisher_and_unsupported_options_are_rejected(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok)
    await client.as_publisher().publish({}, version=7)
    assert await client.get_policy_version() == 7
    r = await client.complete_tokens(req(tok, "hi"))
    assert (r.policy_version_start, r.policy_version_end) == (7, 7)
    with pytest.raises(ConfigError, match="repetition_penalty"):
        await client.complete_tokens(req(tok, "hi", repetition_penalty=1.2))
    with pytest.raises(ConfigError, match="extensions"):
        await client.complete_tokens(
            TokenCompletionRequest(prompt_token_ids=[5, 6], extensions={"local": {"foo": 1}})
        )


async def test_top_k_one_is_greedy(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok)
    greedy = await client.complete_tokens(req(tok, "Board:", temperature=0.0))
    topk = await client.complete_tokens(req(tok, "Board:", seed=9, top_k=1))
    assert topk.completion_token_ids == greedy.completion_token_ids


async def test_passes_the_ludic_client_conformance_checks(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok)
    await check_client(client, prompt_token_ids=tok.encode("hello there"), prompt_logprobs=True)


# --- shared prompts, batched sampling, canonical order, timeouts ---------------------------------------

SYSTEM = "You play Tic-Tac-Toe. Reply with one free cell in move tags, for example <move>B2</move>."
BOARDS = ["X . .\n. O .\n. . .", "Board:\n. . .\n. . .", "O X O\nX . .\n. . X", "Your move", "X X . O O ."]


def chat(tok, board: str) -> list[int]:  # type: ignore[no-untyped-def]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": board}]
    return list(
        tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
    )


def chat_requests(tok, *, temperature: float, **sampling: Any) -> list[TokenCompletionRequest]:  # type: ignore[no-untyped-def]
    """Prompts sharing a system prompt, of different lengths, one of them twice (another seed)."""
    prompts = [chat(tok, b) for b in BOARDS] + [chat(tok, BOARDS[0])]
    return [
        TokenCompletionRequest(
            prompt_token_ids=p,
            sampling=SamplingParams(temperature=temperature, max_tokens=10, **sampling),
            return_=ReturnSpec.for_rl(),
            seed=100 + i,
        )
        for i, p in enumerate(prompts)
    ]


async def complete_all(client: LocalPolicyClient, requests: list[TokenCompletionRequest]) -> list[Any]:
    responses = await asyncio.gather(*(client.complete_tokens(r) for r in requests))
    return [(r.completion_token_ids, r.completion_logprobs, r.finish_reason) for r in responses]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_shared_prefix_and_repeated_prompts_run_once_and_match_the_unshared_path(
    tok, model, temperature
) -> None:  # type: ignore[no-untyped-def]
    requests = chat_requests(tok, temperature=temperature)
    shared = LocalPolicyClient(model, tok, eos_token_ids=[10**6], batch_window_s=0.05)
    alone = LocalPolicyClient(model, tok, eos_token_ids=[10**6], batch_window_s=0.05, share_prefix=False)
    a, b = await complete_all(shared, requests), await complete_all(alone, requests)
    assert shared.stats["batches"] == alone.stats["batches"] == 1
    prefix = len(chat(tok, ""))  # the system prompt and the user header, at least
    assert shared.stats["prefill_tokens"] <= shared.stats["prompt_tokens"] - prefix * (len(requests) - 2)
    assert alone.stats["prefill_tokens"] == alone.stats["prompt_tokens"]
    for request, (ids_a, logps_a, _), (ids_b, logps_b, _) in zip(requests, a, b, strict=True):
        assert ids_a == ids_b
        assert logps_a == pytest.approx(logps_b, abs=1e-4)
        ref = reference_logprobs(model, request.prompt_token_ids, ids_a, temperature)
        assert logps_a == pytest.approx(ref, abs=1e-4)


def nested_prompts() -> list[tuple[int, ...]]:
    """A 30-token header; two 30-token middles, each followed by three 12-20-token tails."""
    rng = random.Random(0)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(10, 600) for _ in range(n))

    header = tokens(30)
    return [
        header + middle + tokens(rng.randint(12, 20)) for middle in (tokens(30), tokens(30)) for _ in range(3)
    ]


def test_levels_run_each_shared_prefix_once_and_leave_every_prompt_its_last_token() -> None:
    prompts = nested_prompts()
    assert plan_levels(prompts) == [(30, [0] * 6), (60, [0, 0, 0, 1, 1, 1])]
    # A prompt that is a prefix of another keeps its last token for the final level.
    assert plan_levels([prompts[0][:40], prompts[0]]) == [(39, [0, 0])]
    # Nothing shared, or one prompt: no levels.
    assert plan_levels([(1, 2, 3), (4, 5, 6)]) == [] and plan_levels([prompts[0]]) == []


async def test_nested_shared_prefixes_match_the_unshared_path(tok, model) -> None:  # type: ignore[no-untyped-def]
    requests = [
        TokenCompletionRequest(
            prompt_token_ids=p,
            sampling=SamplingParams(temperature=t, max_tokens=6),
            return_=ReturnSpec.for_rl(),
            seed=i,
        )
        for i, p in enumerate(nested_prompts())
        for t in (0.0, 1.0)
    ]
    shared = LocalPolicyClient(model, tok, eos_token_ids=[10**6], batch_window_s=0.05)
    alone = LocalPolicyClient(model, tok, eos_token_ids=[10**6], batch_window_s=0.05, share_prefix=False)
    a, b = await complete_all(shared, requests), await complete_all(alone, requests)
    assert shared.stats["batches"] == 1
    # The header once, each middle once, each of the 6 distinct tails once (12 requests).
    assert shared.stats["prefill_tokens"] == 30 + 2 * 30 + sum(len(p) - 60 for p in nested_prompts())
    for (ids_a, logps_a, _), (ids_b, logps_b, _) in zip(a, b, strict=True):
        assert ids_a == ids_b
        assert logps_a == pytest.approx(logps_b, abs=1e-4)


async def test_batched_sampling_is_bit_identical_whatever_the_arrival_order(tok, model) -> None:  # type: ignore[no-untyped-def]
    requests = chat_requests(tok, temperature=1.0) + chat_requests(tok, temperature=0.0)
    requests += [req(tok, "hello", seed=None), req(tok, "Board: X", seed=3, top_p=0.9, top_k=20)]

    async def run(order: list[int]) -> dict[int, Any]:
        client = LocalPolicyClient(model, tok, batch_window_s=0.05, seed=7)
        results = await complete_all(client, [requests[i] for i in order])
        assert client.stats["batches"] == 1
        return dict(zip(order, results, strict=True))

    first = await run(list(range(len(requests))))
    for shuffle_seed in (1, 2):
        order = list(range(len(requests)))
        random.Random(shuffle_seed).shuffle(order)
        assert await run(order) == first  # exact equality, logprobs included


async def test_a_seeded_request_draws_the_same_tokens_whatever_shares_its_batch(tok, model) -> None:  # type: ignore[no-untyped-def]
    target = req(tok, "Natalia has 48 clips", seed=11, max_tokens=12)
    alone = await LocalPolicyClient(model, tok).complete_tokens(target)
    client = LocalPolicyClient(model, tok, batch_window_s=0.05)
    others = [req(tok, p, seed=i) for i, p in enumerate(["hello", "Board:", "x" * 25])]
    together = (await asyncio.gather(client.complete_tokens(target), *map(client.complete_tokens, others)))[0]
    assert client.stats["batches"] == 1
    assert together.completion_token_ids == alone.completion_token_ids
    assert together.completion_logprobs == pytest.approx(alone.completion_logprobs, abs=1e-5)


class _OpaqueCache:
    def __init__(self, cache: Any) -> None:
        self.cache = cache


class _PlainLM(torch.nn.Module):
    """A causal LM whose forward takes no ``logits_to_keep`` and whose cache is no transformers Cache."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.generation_config = inner.generation_config

    def forward(self, input_ids, attention_mask, position_ids, past_key_values=None, use_cache=True):  # type: ignore[no-untyped-def]
        cache = None if past_key_values is None else past_key_values.cache
        out = self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=use_cache,
        )
        return SimpleNamespace(logits=out.logits, past_key_values=_OpaqueCache(out.past_key_values))


async def test_models_without_logits_to_keep_or_a_shareable_cache_still_work(tok, model) -> None:  # type: ignore[no-untyped-def]
    requests = chat_requests(tok, temperature=0.0)
    plain = LocalPolicyClient(_PlainLM(model), tok, batch_window_s=0.05)
    assert not plain._keeps_last_logits_only
    fast = LocalPolicyClient(model, tok, batch_window_s=0.05)
    assert fast._keeps_last_logits_only
    a, b = await complete_all(plain, requests), await complete_all(fast, requests)
    assert plain._cache_shareable is False and plain.stats["prefill_tokens"] > plain.stats["prompt_tokens"]
    assert [x[0] for x in a] == [x[0] for x in b]
    for (_, logps_a, _), (_, logps_b, _) in zip(a, b, strict=True):
        assert logps_a == pytest.approx(logps_b, abs=1e-4)


async def test_a_lora_wrapped_model_keeps_last_logits_only(tok) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("peft")
    from ludic_train.lora import apply_lora

    base = tiny_causal_lm(tok, seed=0)
    peft_model = apply_lora(base, rank=4)
    client = LocalPolicyClient(peft_model, tok, batch_window_s=0.05)
    assert client._keeps_last_logits_only
    requests = chat_requests(tok, temperature=0.0)
    for request, (ids, logps, _) in zip(requests, await complete_all(client, requests), strict=True):
        ref = reference_logprobs(peft_model, request.prompt_token_ids, ids, 0.0)
        assert logps == pytest.approx(ref, abs=1e-4)


def _filter_one_row(logits: torch.Tensor, *, top_k: int | None, top_p: float, min_p: float) -> torch.Tensor:
    """The per-row filter the batched one replaced: the reference."""
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
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def test_batched_filters_keep_what_the_per_row_filters_keep() -> None:
    gen = torch.Generator().manual_seed(0)
    params = [
        (None, 1.0, 0.0),
        (5, 1.0, 0.0),
        (None, 0.8, 0.0),
        (None, 1.0, 0.05),
        (40, 0.9, 0.01),
        (1, 0.5, 0.2),
    ]
    logits = torch.randn(len(params), 300, generator=gen) * 3
    batched = filter_rows(
        logits,
        top_k=[k or 0 for k, _, _ in params],
        top_p=[p for _, p, _ in params],
        min_p=[m for _, _, m in params],
    )
    assert batched is not None
    for row, (k, p, m) in enumerate(params):
        expected = _filter_one_row(logits[row], top_k=k, top_p=p, min_p=m)
        assert torch.equal(torch.isinf(batched[row]), torch.isinf(expected)), (k, p, m)
    assert filter_rows(logits, top_k=[0] * 6, top_p=[1.0] * 6, min_p=[0.0] * 6) is None


def test_batched_sampler_draws_from_the_filtered_distribution() -> None:
    n = 20000
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -8.0]).repeat(n, 1)
    for sampling, allowed in (
        (SamplingParams(temperature=1.0), 6),
        (SamplingParams(temperature=0.5, top_k=3), 3),
    ):
        requests = [TokenCompletionRequest(prompt_token_ids=[1], sampling=sampling, seed=i) for i in range(n)]
        generators = [torch.Generator().manual_seed(i) for i in range(n)]
        tokens, logps = BatchSampler(requests, generators, torch.device("cpu")).sample(logits.clone())
        scaled = logits[0] / sampling.temperature
        expected = torch.softmax(_filter_one_row(scaled, top_k=sampling.top_k, top_p=1.0, min_p=0.0), -1)
        counts = torch.bincount(torch.tensor(tokens), minlength=6).float() / n
        assert counts[allowed:].sum() == 0
        assert torch.allclose(counts, expected, atol=0.015), (counts, expected)
        full = torch.log_softmax(scaled, -1)  # logprobs after temperature, before filtering
        assert logps == pytest.approx([full[t].item() for t in tokens], abs=1e-6)


@pytest.mark.parametrize("vocab", [512, 1000])  # a whole number of blocks, and a padded last block
def testinverse_cdf_never_picks_a_zero_weight_token_and_inverts_the_cumulative_mass(vocab: int) -> None:
    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(7, vocab, generator=gen) * (torch.rand(7, vocab, generator=gen) < 0.3)
    weights[:, 0] = 0.0  # mass only later, so a uniform of 0 must skip index 0
    weights[1] = 0.0
    weights[1, vocab - 2] = 1e-30  # one token of tiny mass: every draw lands on it
    uniforms = torch.tensor([0.0, 0.5, 1 - 2**-53, 0.25, 0.75, 0.999, 0.001], dtype=torch.float64)
    picked = inverse_cdf(weights, uniforms)
    assert all(weights[row, i] > 0 for row, i in enumerate(picked.tolist()))
    assert picked[1] == vocab - 2
    cdf = weights.double().cumsum(-1)
    expected = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True).squeeze(1)
    assert picked.tolist() == expected.tolist()


def _slow_generate(seconds: float):  # type: ignore[no-untyped-def]
    def generate(requests):  # type: ignore[no-untyped-def]
        time.sleep(seconds)
        return [([5], [-0.5], "length", None) for _ in requests]

    return generate


async def test_timeout_counts_generation_not_time_queued_behind_other_batches(
    tok, model, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok, max_batch_size=1, batch_window_s=0, timeout_s=0.5)
    monkeypatch.setattr(client, "_generate", _slow_generate(0.2))
    # The last request waits ~0.6 s behind the others (more than timeout_s), then generates in 0.2 s.
    responses = await asyncio.gather(*(client.complete_tokens(req(tok, "hi", seed=i)) for i in range(4)))
    assert [r.completion_token_ids for r in responses] == [(5,)] * 4
    assert client.stats["batches"] == 4


async def test_generation_and_queue_timeouts_each_name_their_bound(tok, model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(
        model, tok, max_batch_size=1, batch_window_s=0, timeout_s=0.2, queue_timeout_s=0.3
    )
    monkeypatch.setattr(client, "_generate", _slow_generate(0.6))
    running, queued = await asyncio.gather(
        client.complete_tokens(req(tok, "first")),
        client.complete_tokens(req(tok, "second")),
        return_exceptions=True,
    )
    assert isinstance(running, LudicTimeoutError) and "generation not finished within timeout_s=0.2" in str(
        running
    )
    assert isinstance(queued, LudicTimeoutError) and "still queued after queue_timeout_s=0.3" in str(queued)
    assert client._worker is not None
    await client._worker  # the request that gave up while queued is never generated
    assert client.stats["batches"] == 1
    with pytest.raises(ConfigError, match="queue_timeout_s"):
        LocalPolicyClient(model, tok, queue_timeout_s=0)


async def test_aclose_fails_the_batch_in_flight(tok, model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok, batch_window_s=0)
    monkeypatch.setattr(client, "_generate", _slow_generate(0.3))
    task = asyncio.create_task(client.complete_tokens(req(tok, "hi")))
    await asyncio.sleep(0.1)
    await client.aclose()
    with pytest.raises(TransportError, match="closed while the request ran"):
        await asyncio.wait_for(task, 1.0)


async def test_batches_are_cut_by_event_order_so_multi_turn_runs_repeat_bit_for_bit(tok, model) -> None:  # type: ignore[no-untyped-def]
    # Episodes that take different wall time between turns (a synchronous env step of 0-15 ms, a few
    # event-loop hops) must still meet in the same batches on every run: one batch per turn.
    episodes, turns = 6, 3

    async def run(jitter_seed: int) -> tuple[list[Any], float]:
        client = LocalPolicyClient(model, tok, seed=5)
        jitter = random.Random(jitter_seed)

        async def episode(i: int) -> list[Any]:
            text, out = f"game {i}:", []
            for _turn in range(turns):
                _busy(jitter.random() * 0.015)  # blocks the loop, as a CPU-bound env step does
                for _ in range(jitter.randrange(4)):
                    await asyncio.sleep(0)
                r = await client.complete_tokens(req(tok, text, seed=None, max_tokens=4))
                out.append((r.completion_token_ids, r.completion_logprobs))
                text += f" {r.text} |"
            return out

        results = await asyncio.gather(*[episode(i) for i in range(episodes)])
        return results, client.stats["batches"]

    first, batches = await run(0)
    assert batches == turns
    assert await run(1) == (first, batches)  # exact equality, logprobs included


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# --- prompt logprobs ------------------------------------------------------------------------------------


def reference_prompt_logprobs(model, prompt) -> list[float]:  # type: ignore[no-untyped-def]
    """``log p(prompt[i+1] | prompt[:i+1])`` from one plain forward pass, untempered."""
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt)])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return [logp[i, t].item() for i, t in enumerate(prompt[1:])]


def scoring_requests(tok) -> list[TokenCompletionRequest]:  # type: ignore[no-untyped-def]
    """Shared system prompts, nested shared prefixes and a repeated prompt, at three temperatures and
    with filters, every other one asking for prompt logprobs."""
    prompts = [chat(tok, b) for b in BOARDS] + [chat(tok, BOARDS[0])] + nested_prompts()
    return [
        TokenCompletionRequest(
            prompt_token_ids=p,
            sampling=SamplingParams(
                temperature=(1.0, 0.7, 0.0)[i % 3], max_tokens=3, top_k=20 if i % 4 == 1 else None
            ),
            return_=ReturnSpec(return_chosen_logprobs=True, return_prompt_logprobs=i % 2 == 0),
            seed=i,
        )
        for i, p in enumerate(prompts)
    ]


@pytest.mark.parametrize("variant", ["shared", "unshared", "plain_lm"])
async def test_prompt_logprobs_are_the_untempered_logprobs_of_a_full_forward(tok, model, variant) -> None:  # type: ignore[no-untyped-def]
    requests = scoring_requests(tok)
    served = _PlainLM(model) if variant == "plain_lm" else model
    client = LocalPolicyClient(served, tok, batch_window_s=0.05, share_prefix=variant != "unshared")
    responses = await asyncio.gather(*(client.complete_tokens(r) for r in requests))
    assert client.stats["batches"] == 1
    if variant == "shared":  # the prefixes still ran once
        assert client.stats["prefill_tokens"] < client.stats["prompt_tokens"] / 2
    for request, response in zip(requests, responses, strict=True):
        if not request.return_.return_prompt_logprobs:
            assert response.prompt_logprobs is None
            continue
        assert response.prompt_logprobs is not None
        assert len(response.prompt_logprobs) == len(request.prompt_token_ids) - 1
        ref = reference_prompt_logprobs(model, request.prompt_token_ids)
        assert response.prompt_logprobs == pytest.approx(ref, abs=1e-4)
        # Decoding is untouched: the completion's logprobs still match a full forward.
        ref_completion = reference_logprobs(
            model, request.prompt_token_ids, response.completion_token_ids, request.sampling.temperature
        )
        assert response.completion_logprobs == pytest.approx(ref_completion, abs=1e-4)


async def test_prompt_logprobs_score_a_sampled_token_as_its_completion_logprob_did(tok, model) -> None:  # type: ignore[no-untyped-def]
    # The alignment a teacher scorer relies on: the token sampled after a prompt, appended to it, gets
    # as its last prompt logprob the logprob it was sampled with (temperature 1).
    client = LocalPolicyClient(model, tok)
    sampled = await client.complete_tokens(req(tok, "Natalia has 48 clips", seed=5, max_tokens=6))
    full = sampled.prompt_token_ids + sampled.completion_token_ids
    scored = await client.complete_tokens(
        TokenCompletionRequest(
            prompt_token_ids=full,
            sampling=SamplingParams(temperature=1.0, max_tokens=1),
            return_=ReturnSpec(return_prompt_logprobs=True),
        )
    )
    assert scored.prompt_logprobs is not None and sampled.completion_logprobs is not None
    tail = scored.prompt_logprobs[len(sampled.prompt_token_ids) - 1 :]
    assert tail == pytest.approx(sampled.completion_logprobs, abs=1e-4)
    # A one-token prompt has no token with a context: no entries.
    lone = await client.complete_tokens(
        TokenCompletionRequest(prompt_token_ids=[42], return_=ReturnSpec(return_prompt_logprobs=True))
    )
    assert lone.prompt_logprobs == ()


async def test_prompt_logprobs_are_bit_identical_whatever_the_arrival_order(tok, model) -> None:  # type: ignore[no-untyped-def]
    requests = scoring_requests(tok)

    async def run(order: list[int]) -> dict[int, Any]:
        client = LocalPolicyClient(model, tok, batch_window_s=0.05, seed=7)
        responses = await asyncio.gather(*(client.complete_tokens(requests[i]) for i in order))
        assert client.stats["batches"] == 1
        return {
            i: (r.completion_token_ids, r.completion_logprobs, r.prompt_logprobs)
            for i, r in zip(order, responses, strict=True)
        }

    first = await run(list(range(len(requests))))
    order = list(range(len(requests)))
    random.Random(3).shuffle(order)
    assert await run(order) == first


async def test_its_publisher_keeps_the_publisher_contract() -> None:
    from ludic_core.testing import check_publisher
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

    tokenizer = bpe_tokenizer()
    client = LocalPolicyClient(tiny_causal_lm(tokenizer, seed=0), tokenizer)
    try:
        await check_publisher(client.as_publisher(), named_tensors={}, versions=(1, 3), version_source=client)
    finally:
        await client.aclose()


async def test_a_failure_after_generation_reaches_every_caller_at_once(tok, model) -> None:  # type: ignore[no-untyped-def]
    client = LocalPolicyClient(model, tok, timeout_s=600.0)

    def broken_decode(ids: object) -> str:
        raise RuntimeError("decode broke")

    client._decode = broken_decode  # type: ignore[method-assign]
    calls = [client.complete_tokens(req(tok, p, max_tokens=2)) for p in ("hello", "Board:")]
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=60)
    for result in results:
        assert isinstance(result, TransportError) and "RuntimeError: decode broke" in str(result)
