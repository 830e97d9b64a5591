"""Grouped-query attention without per-head K/V copies: the same outputs as transformers' sdpa."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from padded_decode import padded_decode

from ludic_train import grouped_attention
from ludic_train.grouped_attention import GROUPED_SDPA, grouped_kv_attention
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return bpe_tokenizer()


def padded_batch(tok: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Three left-padded prompts of different lengths: a batch that needs an attention mask."""
    texts = ["Board: X.O", "Board: X.O .X. ..O and a longer tail", "Hi"]
    rows = [tok.encode(t) for t in texts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return ids, mask


class SdpaSpy:
    """Counts the grouped-query SDPA calls (``enable_gqa=True`` with a mask) torch receives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.grouped_with_mask = 0
        real = torch.nn.functional.scaled_dot_product_attention

        def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
            if kwargs.get("enable_gqa") and kwargs.get("attn_mask") is not None:
                self.grouped_with_mask += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_masked_prefill_and_decode_are_bit_identical_to_sdpa(tok, arch, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, arch=arch, seed=1)
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped heads
    assert model.config._attn_implementation == "sdpa"
    ids, mask = padded_batch(tok)
    stock = padded_decode(model, ids, mask, 5)
    spy = SdpaSpy(monkeypatch)
    with grouped_kv_attention(model) as switched:
        assert switched and model.config._attn_implementation == GROUPED_SDPA
        grouped = padded_decode(model, ids, mask, 5)
    # Every layer of the prefill and of each decode step took the grouped call.
    assert spy.grouped_with_mask == model.config.num_hidden_layers * len(stock)
    assert model.config._attn_implementation == "sdpa"
    for a, b in zip(stock, grouped, strict=True):
        assert torch.equal(a, b)


def test_keys_and_values_that_need_gradients_keep_the_stock_path(tok, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=2)
    model.train()
    ids, mask = padded_batch(tok)

    def gradients() -> list[torch.Tensor]:
        model.zero_grad()
        model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)[..., 7].mean().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    stock = gradients()
    spy = SdpaSpy(monkeypatch)
    with grouped_kv_attention(model):
        grouped = gradients()
    assert spy.grouped_with_mask == 0
    for a, b in zip(stock, grouped, strict=True):
        assert torch.equal(a, b)


def test_the_model_is_switched_back_when_the_block_raises(tok) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=0)
    with pytest.raises(RuntimeError, match="boom"), grouped_kv_attention(model):
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


def test_other_attention_implementations_are_left_alone(tok) -> None:  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(tok, seed=0)
    model.set_attn_implementation("eager")
    with grouped_kv_attention(model) as switched:
        assert not switched and model.config._attn_implementation == "eager"
    with grouped_kv_attention(torch.nn.Linear(2, 2)) as switched:  # not a transformers model
        assert not switched


def test_a_transformers_without_attention_registries_keeps_the_stock_path(tok, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grouped_attention, "_registered", False)
    model = tiny_causal_lm(tok, seed=0)
    with grouped_kv_attention(model) as switched:
        assert not switched and model.config._attn_implementation == "sdpa"


def test_the_local_client_decodes_with_grouped_attention_and_switches_back(tok, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
    from ludic_train.local_client import LocalPolicyClient

    model = tiny_causal_lm(tok, seed=0)
    client = LocalPolicyClient(model, tok, batch_window_s=0.05)
    requests = [
        TokenCompletionRequest(
            prompt_token_ids=tok.encode(text),
            sampling=SamplingParams(max_tokens=4),
            return_=ReturnSpec.for_rl(),
            seed=i,
        )
        for i, text in enumerate(["Board: X.O", "Board: X.O .X. ..O and a longer tail"])
    ]
    spy = SdpaSpy(monkeypatch)

    async def run() -> None:
        await asyncio.gather(*(client.complete_tokens(r) for r in requests))

    asyncio.run(run())
    assert spy.grouped_with_mask > 0
    assert model.config._attn_implementation == "sdpa"
