"""The GuessNumber rollout setup both engine benchmarks run: scripted replies, byte tokens, RL returns.

Two engines play them: :func:`make_engine` with the minimal test agent
(:class:`~ludic_core.testing.ScriptedAgent`), and :func:`make_full_engine` with the agent users run,
``ludic_agents.Agent`` (full-dialog context, a chat template, a parser). Both render the same
``<|role|>content`` text and byte tokens as :func:`bare_episode`, so every side sends the same prompts.
"""

from __future__ import annotations

from collections.abc import Callable

from ludic_agents import Agent, FullDialog
from ludic_core.engine import RolloutEngine
from ludic_core.inference import InferenceSpec, ReturnSpec, TokenCompletionRequest
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.testing import (
    ByteChatTemplate,
    ByteTokenizer,
    GuessNumberEnv,
    ScriptedAgent,
    ScriptedChatClient,
)
from ludic_core.testing.scripted_agent import identity_parser, render_text_dialog
from ludic_core.types import Message

REPLIES = ["5", "3", "8", "1", "9", "2", "7", "4", "6", "10"]
INFERENCE = InferenceSpec(return_=ReturnSpec.for_rl())
TOKENIZER = ByteTokenizer()
# The assistant cue as the bytes of its token ids (byte tokens fit in a byte for the default offset).
_CUE = bytes(TOKENIZER.encode("<|assistant|>"))


def reply(request: TokenCompletionRequest, _call_index: int) -> str:
    """REPLIES in order within each episode, whatever order concurrent episodes call the model in.

    Keyed on the turn (the assistant cues in the prompt's tokens, which every agent sends; only some
    send the prompt text), not the client's global call counter: with a shared counter, concurrency
    would change which episode gets which reply, so the sides of a comparison would play different
    games.
    """
    turn = bytes(request.prompt_token_ids).count(_CUE) - 1
    return REPLIES[turn % len(REPLIES)]


Reply = Callable[[TokenCompletionRequest, int], str]


def make_client(latency_s: float = 0.0, replies: Reply = reply) -> ScriptedChatClient:
    """A zero-cost model that plays REPLIES in order each episode (or what ``replies`` says), after
    ``latency_s`` per call."""
    return ScriptedChatClient(replies, latency_s=latency_s)


def make_engine(latency_s: float = 0.0) -> RolloutEngine:
    client = make_client(latency_s)
    return RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
    )


def make_full_engine(latency_s: float = 0.0, replies: Reply = reply) -> RolloutEngine:
    """The engine with ``ludic_agents.Agent``: a full dialog (the env's system prompt), the text chat
    template, the parser the minimal agent uses; one agent per episode, as the CLI builds them."""
    client = make_client(latency_s, replies)
    template = ByteChatTemplate(TOKENIZER)

    def protocol() -> SingleAgentProtocol:
        agent = Agent(client=client, parser=identity_parser, chat_template=template, context=FullDialog())
        return SingleAgentProtocol(agent)

    return RolloutEngine(env_factories={"guess": GuessNumberEnv}, protocol_factories={"single": protocol})


def requests(episodes: int) -> list[RolloutRequest]:
    """Episodes with env and sampling seeds 0..episodes-1."""
    return [
        RolloutRequest(
            EnvSpec("guess"), ProtocolSpec("single"), env_seed=e, sampling_seed=e, inference=INFERENCE
        )
        for e in range(episodes)
    ]


async def bare_episode(
    client: ScriptedChatClient, episode: int, max_steps: int, keep: list[object] | None = None
) -> int:
    """The baseline both benchmarks compare with: one episode as a minimal hand-written loop (render,
    tokenise, call the client, step the env), no engine. Returns the model calls it made.

    It renders the same prompts the engine's agent does, the env's suggested system prompt included,
    so both sides tokenise, send and check the same number of tokens. With ``keep``, it appends each
    step's response and env outcome there, and the episode's messages at its end, as a loop that
    returns what it ran would (the engine keeps every rollout until it returns them)."""
    encode = TOKENIZER.encode
    env = GuessNumberEnv()
    obs, _ = env.env_reset(seed=episode)
    messages: list[Message] = [
        {"role": "system", "content": env.suggested_sysprompt},
        {"role": "user", "content": obs},
    ]
    calls = 0
    while calls < max_steps:
        prompt = render_text_dialog(messages)
        request = TokenCompletionRequest.from_spec(
            encode(prompt), INFERENCE, seed=episode, prompt_text=prompt
        )
        response = await client.complete_tokens(request)
        calls += 1
        messages.append({"role": "assistant", "content": response.text})
        outcome = env.env_step(response.text.strip())
        if keep is not None:
            keep.append((response, outcome))
        if outcome.terminated or outcome.truncated:
            break
        messages.append({"role": "user", "content": outcome.obs})
    if keep is not None:
        keep.append(messages)
    return calls
