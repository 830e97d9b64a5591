from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import pytest

from ludic_core.env import SingleAgentEnv
from ludic_core.errors import ConfigError, ConformanceError
from ludic_core.inference import ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.testing import (
    ByteTokenizer,
    GuessNumberEnv,
    ScriptedChatClient,
    SeededChatClient,
    check_client,
    check_env,
    scripted_prompt_logprob,
)
from ludic_core.types import ChatResponse, Info, StepOutcome


def test_guess_number_env_conforms() -> None:
    check_env(GuessNumberEnv(max_number=4, max_guesses=3), actions=["1", "2", "3", "4", "x"])


class GlobalRandomEnv(SingleAgentEnv):
    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        random.seed(seed)  # the original tic-tac-toe's defect
        return "go", {}

    def env_step(self, action: str) -> StepOutcome:
        return StepOutcome(obs=str(random.random()), terminated=True)


class NondeterministicEnv(SingleAgentEnv):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        self.calls += 1
        return f"go {self.calls}", {}

    def env_step(self, action: str) -> StepOutcome:
        return StepOutcome(obs="done", terminated=True, info={"bad": {1, 2}})


def test_check_env_reports_global_random_and_nondeterminism() -> None:
    with pytest.raises(ConformanceError, match="global `random`"):
        check_env(GlobalRandomEnv())
    with pytest.raises(ConformanceError) as err:
        check_env(NondeterministicEnv())
    assert "differ" in str(err.value) and "JSON" in str(err.value)


class WrongIdsEnv(SingleAgentEnv):
    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return "go", {}

    def env_step(self, action: str) -> StepOutcome:
        return StepOutcome(obs="x", terminated=True)

    def step(self, actions: Mapping[str, str]) -> dict[str, StepOutcome]:
        return {"ghost": StepOutcome(obs="x")}


def test_check_env_reports_unknown_agents() -> None:
    with pytest.raises(ConformanceError, match="no outcome for acting agents"):
        check_env(WrongIdsEnv())


async def test_scripted_clients_conform() -> None:
    await check_client(SeededChatClient(["hello", "world"]), prompt_token_ids=[5, 6], prompt_logprobs=True)
    await check_client(
        ScriptedChatClient(["abcdefghijklmnop"], cycle=True),
        prompt_token_ids=[5, 6, 7],
        max_tokens=4,
        prompt_logprobs=True,
    )


async def test_scripted_prompt_logprobs_are_a_fixed_function_of_position_and_token() -> None:
    client = ScriptedChatClient(["ok"], cycle=True)
    prompt = (7, 3, 3, 9)

    async def score(**kwargs: object) -> tuple[float, ...] | None:
        request = TokenCompletionRequest(
            prompt_token_ids=prompt, return_=ReturnSpec(return_prompt_logprobs=True), **kwargs
        )
        return (await client.complete_tokens(request)).prompt_logprobs

    expected = tuple(scripted_prompt_logprob(p, prompt[p]) for p in (1, 2, 3))
    assert await score() == expected
    assert await score(seed=5, sampling=SamplingParams(temperature=0.2)) == expected
    assert len(set(expected)) == 3 and all(lp < 0 for lp in expected)
    # Not asked for: none.
    plain = await client.complete_tokens(TokenCompletionRequest(prompt_token_ids=prompt))
    assert plain.prompt_logprobs is None


class LyingClient:
    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        return ChatResponse(
            text="x",
            prompt_token_ids=[0],
            completion_token_ids=list(range(request.sampling.max_tokens + 2)),
            finish_reason="weird",
        )


async def test_check_client_reports_every_problem() -> None:
    with pytest.raises(ConformanceError) as err:
        await check_client(LyingClient(), prompt_token_ids=[5, 6])
    text = str(err.value)
    assert "prompt_token_ids differ" in text and "exceed max_tokens" in text
    assert "finish_reason 'weird'" in text and "logprobs were requested" in text


class PromptLogprobClient(ScriptedChatClient):
    """Returns the prompt logprobs that ``make`` builds, whatever they are."""

    def __init__(self, make: Callable[[TokenCompletionRequest], list[float] | None]) -> None:
        super().__init__(["ok"], cycle=True)
        self.make = make

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        response = await super().complete_tokens(request)
        values = self.make(request) if request.return_.return_prompt_logprobs else None
        # object.__setattr__: bypass the response's own length check, as a broken client's parser might.
        object.__setattr__(response, "prompt_logprobs", None if values is None else tuple(values))
        return response


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda r: None, "prompt logprobs were requested (return_prompt_logprobs) but not returned"),
        (lambda r: [-1.0], "1 prompt logprobs for a 3-token prompt; expected 2"),
        (lambda r: [-1.0, float("nan")], "prompt logprobs must be finite"),
        (lambda r: [-1.0, 0.5], "prompt logprobs must be <= 0"),
        (lambda r: [-1.0, -r.sampling.temperature - 1], "prompt logprobs depend on the sampling temperature"),
    ],
)
async def test_check_client_checks_prompt_logprobs_when_asked(
    make: Callable[[TokenCompletionRequest], list[float] | None], problem: str
) -> None:
    client = PromptLogprobClient(make)
    await check_client(client, prompt_token_ids=[5, 6, 7])  # not asked: not checked
    with pytest.raises(ConformanceError) as err:
        await check_client(client, prompt_token_ids=[5, 6, 7], prompt_logprobs=True)
    assert problem in str(err.value)


async def test_scripted_client_cuts_at_max_tokens_and_reports_length() -> None:
    from ludic_core.inference import ReturnSpec, SamplingParams

    client = ScriptedChatClient(["héllo world"])
    request = TokenCompletionRequest(
        prompt_token_ids=[1], sampling=SamplingParams(max_tokens=3), return_=ReturnSpec.for_rl(), seed=5
    )
    response = await client.complete_tokens(request)
    assert response.finish_reason == "length" and len(response.completion_token_ids) == 3
    assert response.completion_token_ids == tuple(ByteTokenizer().encode("héllo world")[:3])
    assert response.completion_logprobs is not None and all(lp < 0 for lp in response.completion_logprobs)
    with pytest.raises(ConfigError, match="ran out of responses"):
        await client.complete_tokens(request)


async def test_seeded_client_is_reproducible_per_seed() -> None:
    client = SeededChatClient([str(i) for i in range(50)])
    texts = []
    for seed in (1, 2, 1):
        r = await client.complete_tokens(TokenCompletionRequest(prompt_token_ids=[1], seed=seed))
        texts.append(r.text)
    assert texts[0] == texts[2]


@pytest.mark.parametrize("offset", [1, 3, 11, 12, 40])
def test_byte_tokenizer_ids_are_the_utf8_bytes_shifted_by_the_offset(offset: int) -> None:
    # Offsets up to 11 take the translate path, larger ones the per-byte loop: the same ids either way.
    tokenizer = ByteTokenizer(offset=offset, eos_token_id=0)
    rng = random.Random(offset)
    code_points = [0x41, 0x7F, 0xE9, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]
    for _ in range(200):
        text = "".join(chr(rng.choice(code_points)) for _ in range(rng.randint(0, 12)))
        ids = tokenizer.encode(text)
        assert ids == [b + offset for b in text.encode("utf-8")]
        assert all(type(i) is int for i in ids)
        assert tokenizer.decode(ids) == text


@pytest.mark.parametrize("offset", [1, 3, 11, 12, 40])
def test_byte_tokenizer_decode_drops_special_ids_and_shifts_the_rest_back(offset: int) -> None:
    # Ids that fit in a byte take the translate path, others the per-id loop: the same text either way.
    tokenizer = ByteTokenizer(offset=offset, eos_token_id=0)
    rng = random.Random(offset)
    for _ in range(300):
        ids = [rng.randrange(0, 256 + offset) for _ in range(rng.randint(0, 10))]
        expected = bytes(i - offset for i in ids if i >= offset).decode("utf-8", errors="replace")
        assert tokenizer.decode(ids) == tokenizer.decode(tuple(ids)) == expected
