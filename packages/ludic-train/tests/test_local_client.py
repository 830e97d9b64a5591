"""LocalPolicyClient against a tiny real model."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from ludic_core.errors import ConfigError
from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.testing import check_client
from ludic_train.local_client import LocalPolicyClient
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm


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
    await check_client(client, prompt_token_ids=tok.encode("hello there"))
