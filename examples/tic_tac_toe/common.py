"""Pieces shared by the Tic-Tac-Toe examples: the agent, the engine, requests and eval metrics."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ludic_agents.agent import Agent
from ludic_agents.chat_template import ChatTemplate
from ludic_agents.context import FullDialog
from ludic_core.engine import RolloutEngine
from ludic_core.evaluation import Reducer
from ludic_core.inference import ChatClient, InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.parsing import ParseResult
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy
from ludic_envs.tictactoe import TicTacToeEnv

SYSTEM_PROMPT = (
    "You play Tic-Tac-Toe. Cells are A1..C3 (letter = column, number = row). "
    "Reply with one free cell inside move tags, for example <move>B2</move>, and nothing else."
)

_TAGGED = re.compile(r"<move>\s*([ABCabc][123])\s*</move>")
_BARE = re.compile(r"\b([ABCabc][123])\b")


def move_parser(text: str) -> ParseResult:
    """``<move>B2</move>`` earns a +0.2 format bonus; a bare cell name (the first one in the text) is
    accepted with +0.1; no cell name at all is a parse failure (-1). Lenient on purpose: a 135M
    model rarely follows the tag format at first, and the reward should teach it to."""
    tagged = _TAGGED.search(text)
    if tagged:
        return ParseResult(action=tagged.group(1).upper(), reward=0.2)
    bare = _BARE.search(text)
    if bare:
        return ParseResult(action=bare.group(1).upper(), reward=0.1)
    return ParseResult(action=None, reward=-1.0, obs="Reply with one free cell such as <move>B2</move>.")


OUTCOMES = ("win", "draw", "loss", "illegal", "parse_error", "unfinished")


def make_engine(
    client: ChatClient,
    *,
    opponent: str = "random",
    agent_mark: str = "X",
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    rollout_log: str | None = None,
    step_reward: float = 0.2,
    chat_template: ChatTemplate | None = None,
) -> RolloutEngine:
    """An engine whose episodes pit an ``Agent`` (``<move>..</move>`` parser, full dialog) against a bot.

    ``chat_template`` renders and tokenizes the dialog; by default the client's own tokenizer does
    (``LocalPolicyClient`` and ``TinkerChatClient`` carry one; a ``VLLMClient`` does not)."""

    def env() -> TicTacToeEnv:
        # A small reward for every legal move that does not end the game: with a weak model most games
        # end in a parse error, and this keeps "one more legal move" distinguishable from "none".
        return TicTacToeEnv(opponent=opponent, agent_mark=agent_mark, rewards={"step": step_reward})  # type: ignore[arg-type]

    def protocol() -> SingleAgentProtocol:
        agent = Agent(
            client=client,
            parser=move_parser,
            chat_template=chat_template,
            context=FullDialog(system_prompt=system_prompt),
            # A move cut by max_tokens still counts if it names a cell: the parser decides.
            reject_incomplete_completions=False,
        )
        return SingleAgentProtocol(agent, stop_on_parse_error=True)

    return RolloutEngine(
        env_factories={"tictactoe": env},
        protocol_factories={"ttt_agent": protocol},
        base_seed=seed,
        rollout_log=rollout_log,
    )


def inference_spec(*, temperature: float, max_tokens: int, logprobs: bool) -> InferenceSpec:
    return InferenceSpec(
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens),
        return_=ReturnSpec(return_chosen_logprobs=logprobs),
    )


def grpo_requests(
    *, group_size: int, groups_per_step: int, temperature: float, max_tokens: int, seed: int
) -> Callable[[int], list[RolloutRequest]]:
    """``step -> requests``: ``groups_per_step`` games, each played ``group_size`` times (same env seed,
    different sampling seeds). A pure function of the step, so resumed runs replay the same requests."""
    spec = inference_spec(temperature=temperature, max_tokens=max_tokens, logprobs=True)

    def requests(step: int) -> list[RolloutRequest]:
        strategy = GRPORequestStrategy(group_size=group_size, seed=derive_seed(seed, "train", step))
        base = RolloutRequest(env=EnvSpec("tictactoe"), protocol=ProtocolSpec("ttt_agent"), inference=spec)
        return strategy.expand([base] * groups_per_step)

    return requests


def eval_requests(*, episodes: int, temperature: float, max_tokens: int, seed: int) -> list[RolloutRequest]:
    """Fixed env and sampling seeds: the before/after evals play the same games."""
    spec = inference_spec(temperature=temperature, max_tokens=max_tokens, logprobs=False)
    return [
        RolloutRequest(
            env=EnvSpec("tictactoe"),
            protocol=ProtocolSpec("ttt_agent"),
            env_seed=derive_seed(seed, "eval-env", i),
            sampling_seed=derive_seed(seed, "eval-sampling", i),
            inference=spec,
        )
        for i in range(episodes)
    ]


def outcome(record: dict[str, Any]) -> str:
    """One label per game; parse errors end the episode (``stop_on_parse_error``), so they come first."""
    if record.get("failed"):
        return "unfinished"
    if record.get("parse_error"):
        return "parse_error"
    if record.get("illegal_reason"):
        return "illegal"
    result = record.get("result")
    return result if result in ("win", "draw", "loss") else "unfinished"


def outcome_reducers() -> Sequence[Reducer]:
    reducers = [Reducer(f"{name}_rate", _is(name), "rate", "rollouts") for name in OUTCOMES]
    reducers.append(Reducer("reward_mean", "total_reward", "mean", "rollouts"))
    return reducers


def _is(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda record: outcome(record) == name
