"""The sampler's in-place KV cache: the same logits as transformers' DynamicCache, fewer copies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from padded_decode import padded_decode

from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_train import local_client
from ludic_train.growing_kv_cache import MIN_SPARE, growing_kv_cache
from ludic_train.local_client import LocalPolicyClient
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return bpe_tokenizer()


# Three rows, the first and third left-padded (pad id 0).
IDS = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25], [0, 31, 32, 33, 34]])


def decode(model: Any, cache: Any, steps: int, *, drop_row_at: int | None = None) -> list[torch.Tensor]:
    return padded_decode(model, IDS, (IDS != 0).long(), steps, cache=cache, drop_row_at=drop_row_at)


@pytest.mark.parametrize("drop_row_at", [None, 3, MIN_SPARE + 10])
def test_decoding_past_the_spare_room_and_dropping_rows_gives_the_dynamic_cache_logits(
    tok, drop_row_at
) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=3)
    steps = MIN_SPARE + 40  # the buffers must be reallocated at least once
    stock = decode(model, None, steps, drop_row_at=drop_row_at)
    cache = growing_kv_cache(model.config)
    assert cache is not None
    grown = decode(model, cache, steps, drop_row_at=drop_row_at)
    layer = cache.layers[0]
    assert type(layer).__name__ == "GrowingLayer"
    # The keys attention read are a view of a buffer with spare room, not a fresh tensor per step.
    assert layer.keys.data_ptr() == layer._buffers[0].data_ptr()
    assert layer._buffers[0].shape[-2] > layer.keys.shape[-2] == 5 + steps
    for a, b in zip(stock, grown, strict=True):
        assert torch.equal(a, b)


def test_room_reserved_for_the_decode_steps_means_no_reallocation(tok) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=3)
    steps = 50
    cache = growing_kv_cache(model.config, reserve=steps)
    buffers: list[int] = []
    real_update = cache.layers[0].update

    def update(*args: Any, **kwargs: Any) -> Any:
        keys, values = real_update(*args, **kwargs)
        buffers.append(cache.layers[0]._buffers[0].data_ptr())
        return keys, values

    cache.layers[0].update = update
    stock = decode(model, None, steps)
    assert all(torch.equal(a, b) for a, b in zip(stock, decode(model, cache, steps), strict=True))
    assert len(buffers) == steps + 1 and len(set(buffers)) == 1  # the prefill's buffers, to the end


def test_a_base_method_that_replaces_the_keys_is_adopted_on_the_next_update(tok) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=4)
    cache = growing_kv_cache(model.config)
    ids = torch.tensor([[11, 12, 13, 14]])
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(2)  # DynamicLayer's own: assigns fresh keys and values
        out = model(input_ids=torch.tensor([[15], [16]]), past_key_values=cache, use_cache=True)
        reference = model(input_ids=torch.tensor([[11, 12, 13, 14, 15], [11, 12, 13, 14, 16]])).logits[:, -1]
    assert cache.get_seq_length() == 5
    torch.testing.assert_close(out.logits[:, -1], reference, rtol=0, atol=1e-5)


def test_the_local_client_samples_exactly_what_it_sampled_with_the_stock_cache(tok, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=5)
    requests = [
        TokenCompletionRequest(
            prompt_token_ids=tok.encode(text),
            sampling=SamplingParams(temperature=1.0, max_tokens=MIN_SPARE + 20),
            return_=ReturnSpec.for_rl(),
            seed=i,
        )
        for i, text in enumerate(["System: play.\nBoard: X..", "System: play.\nBoard: .O.X", "Hello"])
    ]

    def sample() -> list[tuple[list[int], list[float] | None]]:
        client = LocalPolicyClient(model, tok, eos_token_ids=[10**6], batch_window_s=0.05)

        async def run() -> list[Any]:
            return await asyncio.gather(*(client.complete_tokens(r) for r in requests))

        responses = asyncio.run(run())
        assert client.stats["batches"] == 1
        return [(list(r.completion_token_ids), r.completion_logprobs) for r in responses]

    used = []

    def spy(config: Any, *, reserve: int) -> Any:
        used.append(reserve)
        return growing_kv_cache(config, reserve=reserve)

    monkeypatch.setattr(local_client, "growing_kv_cache", spy)
    grown = sample()
    assert used == [MIN_SPARE + 20]  # a growing cache with room for the longest completion
    monkeypatch.setattr(local_client, "growing_kv_cache", lambda config, **_: None)  # the model's own cache
    assert sample() == grown  # tokens and logprobs, exactly
