"""TinkerChatClient against the real SDK and the fake service (real sampling by a tiny torch model)."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ludic_core.errors import ConfigError, DataError
from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_tinker import TinkerChatClient, TinkerLoss, TinkerTrainer
from ludic_tinker.testing import EOS_ID, FakeTinkerService


def _request(tokenizer, text="<abc", **sampling) -> TokenCompletionRequest:  # type: ignore[no-untyped-def]
    params = {"temperature": 1.0, "max_tokens": 6, **sampling}
    seed = params.pop("seed", 7)
    return TokenCompletionRequest(
        prompt_token_ids=tokenizer.encode(text),
        sampling=SamplingParams(**params),
        return_=ReturnSpec.for_rl(),
        seed=seed,
    )


async def _client(training_client, tokenizer, **kw) -> TinkerChatClient:  # type: ignore[no-untyped-def]
    sampler_holder = TinkerChatClient(object(), tokenizer, **kw)
    trainer = TinkerTrainer(
        training_client, _NoBatches(), TinkerLoss.ppo(clip_low=0.8, clip_high=1.2), chat_client=sampler_holder
    )
    await trainer.refresh_sampler()
    return sampler_holder


class _NoBatches:
    async def next_batch(self):  # type: ignore[no-untyped-def]
        raise AssertionError("these tests do not train")


async def test_completion_tokens_logprobs_and_version(
    training_client, tokenizer, fake_service: FakeTinkerService
):
    client = await _client(training_client, tokenizer)
    request = _request(tokenizer)
    response = await client.complete_tokens(request)

    assert response.prompt_token_ids == request.prompt_token_ids
    assert 1 <= len(response.completion_token_ids) <= 6
    assert response.completion_logprobs is not None
    assert len(response.completion_logprobs) == len(response.completion_token_ids)
    assert response.policy_version == 0
    assert response.text == tokenizer.decode(response.completion_token_ids)
    expected_reason = "stop" if response.completion_token_ids[-1] == EOS_ID else "length"
    assert response.finish_reason == expected_reason

    # The logprobs are the sampler model's real logprobs of the sampled tokens.
    model = fake_service.base_model_instance()
    full = list(request.prompt_token_ids) + list(response.completion_token_ids)
    with torch.no_grad():
        lp = model.token_logprobs(full[:-1], full[1:])[len(request.prompt_token_ids) - 1 :]
    assert lp.tolist() == pytest.approx(list(response.completion_logprobs), abs=1e-5)

    sent = fake_service.sample_requests[-1]
    assert sent["sampling_params"]["seed"] == 7
    assert sent["sampling_params"]["max_tokens"] == 6
    assert sent["prompt"]["chunks"][0]["tokens"] == list(request.prompt_token_ids)


async def test_same_seed_same_completion_and_length_finish(training_client, tokenizer):
    client = await _client(training_client, tokenizer)
    first = await client.complete_tokens(_request(tokenizer, max_tokens=3, seed=11))
    second = await client.complete_tokens(_request(tokenizer, max_tokens=3, seed=11))
    assert first.completion_token_ids == second.completion_token_ids
    if EOS_ID not in first.completion_token_ids:
        assert first.finish_reason == "length"
        assert len(first.completion_token_ids) == 3


async def test_stop_token_ids_end_the_completion(training_client, tokenizer, fake_service):
    client = await _client(training_client, tokenizer)
    # Greedy decoding from this prompt emits a fixed sequence; stop on its second token.
    greedy = await client.complete_tokens(_request(tokenizer, temperature=0.0, max_tokens=5))
    stop_id = greedy.completion_token_ids[1]
    stopped = await client.complete_tokens(
        _request(tokenizer, temperature=0.0, max_tokens=5, stop_token_ids=(stop_id,))
    )
    cut = greedy.completion_token_ids.index(stop_id) + 1
    assert stopped.completion_token_ids == greedy.completion_token_ids[:cut]
    assert stopped.finish_reason == "stop"
    assert fake_service.sample_requests[-1]["sampling_params"]["stop"] == [stop_id]


async def test_prompt_logprobs_are_the_sampler_models_logprobs_of_the_prompt(
    training_client, tokenizer, fake_service: FakeTinkerService
):
    client = await _client(training_client, tokenizer)
    prompt = tokenizer.encode("<abcab")
    request = TokenCompletionRequest(
        prompt_token_ids=prompt,
        sampling=SamplingParams(temperature=1.0, max_tokens=1),
        return_=ReturnSpec(return_prompt_logprobs=True),
        seed=3,
    )
    response = await client.complete_tokens(request)
    assert fake_service.sample_requests[-1]["prompt_logprobs"] is True
    model = fake_service.base_model_instance()
    with torch.no_grad():
        expected = model.token_logprobs(prompt[:-1], prompt[1:]).tolist()
    assert response.prompt_logprobs is not None and len(response.prompt_logprobs) == len(prompt) - 1
    assert list(response.prompt_logprobs) == pytest.approx(expected, abs=1e-5)
    # Not asked: not requested from Tinker, none returned.
    plain = await client.complete_tokens(_request(tokenizer))
    assert not fake_service.sample_requests[-1].get("prompt_logprobs")
    assert plain.prompt_logprobs is None


class _ScriptedSampler:
    """Answers every sample call with one sequence and these prompt logprobs."""

    def __init__(self, prompt_logprobs: list[float | None] | None) -> None:
        self.prompt_logprobs = prompt_logprobs

    def sample(self, **kwargs):  # type: ignore[no-untyped-def]
        sequence = SimpleNamespace(tokens=[5], logprobs=[-0.5], stop_reason="length")
        response = SimpleNamespace(sequences=[sequence], prompt_logprobs=self.prompt_logprobs)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_result(response)
        return future


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        (None, "no prompt logprobs, but the request asked for them"),
        ([None, -1.0], "2 prompt logprobs for a 3-token prompt"),
        ([None, -1.0, None], r"no prompt logprob at prompt positions \[2\]"),
    ],
)
async def test_missing_or_short_prompt_logprobs_are_data_errors(tokenizer, values, problem):
    client = TinkerChatClient(_ScriptedSampler(values), tokenizer)
    request = TokenCompletionRequest(
        prompt_token_ids=[3, 4, 5],
        sampling=SamplingParams(max_tokens=1),
        return_=ReturnSpec(return_prompt_logprobs=True),
    )
    with pytest.raises(DataError, match=problem):
        await client.complete_tokens(request)
    client_ok = TinkerChatClient(_ScriptedSampler([None, -1.0, -2.0]), tokenizer)
    assert (await client_ok.complete_tokens(request)).prompt_logprobs == (-1.0, -2.0)


async def test_unsupported_sampling_options_raise_or_are_reported(training_client, tokenizer):
    strict = await _client(training_client, tokenizer)
    with pytest.raises(ConfigError, match="min_p"):
        await strict.complete_tokens(_request(tokenizer, min_p=0.1))
    with pytest.raises(ConfigError, match="presence_penalty"):
        await strict.complete_tokens(_request(tokenizer, presence_penalty=0.5))

    lenient = await _client(training_client, tokenizer, unsupported="report")
    response = await lenient.complete_tokens(_request(tokenizer, min_p=0.1, repetition_penalty=1.1))
    assert response.info["ignored_sampling_params"] == ["min_p", "repetition_penalty"]


async def test_backend_extensions_are_rejected(training_client, tokenizer):
    client = await _client(training_client, tokenizer)
    request = TokenCompletionRequest(
        prompt_token_ids=tokenizer.encode("<a"), extensions={"tinker": {"beam_width": 4}}
    )
    with pytest.raises(ConfigError, match="beam_width"):
        await client.complete_tokens(request)


async def test_sampler_swap_changes_version(training_client, tokenizer):
    client = await _client(training_client, tokenizer)
    old = client.sampling_client
    client.set_sampling_client(old, policy_version=5)
    assert await client.get_policy_version() == 5
    response = await client.complete_tokens(_request(tokenizer))
    assert (response.policy_version_start, response.policy_version_end) == (5, 5)


async def test_no_sampler_yet_is_a_clear_error(tokenizer):
    client = TinkerChatClient(None, tokenizer)
    with pytest.raises(ConfigError, match="no sampler yet"):
        await client.complete_tokens(_request(tokenizer))


def test_constructor_validates(tokenizer):
    with pytest.raises(ConfigError, match="unsupported"):
        TinkerChatClient(object(), tokenizer, unsupported="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="decode"):
        TinkerChatClient(object(), object())  # type: ignore[arg-type]
