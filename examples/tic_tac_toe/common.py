"""Pieces shared by the Tic-Tac-Toe examples: the agent, the engine, requests and eval metrics.

The setup is chosen so that reinforcement learning has something to learn and nothing to exploit:

* **board-only prompts** (:class:`~ludic_agents.context.LatestObservation`): the game is Markov, so the
  model sees the system prompt and the current board, never its own earlier replies (which a small
  model otherwise copies) or the opponent's last move spelled out (which it otherwise echoes);
* **a strict parser**: the reply must be exactly ``<move>B2</move>``; generation stops at
  ``</move>``, so nothing after the move is sampled, rewarded or trained on;
* **outcome rewards only**: win 1, draw 0.5, loss 0, an illegal move or a malformed reply -1. No bonus
  per move, which would pay for winning slowly;
* **both sides**: ``agent_mark="random"`` draws X or O per game from the env seed, so a GRPO group
  (one env seed) always plays the same side.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ludic_agents.agent import Agent
from ludic_agents.chat_template import ChatTemplate
from ludic_agents.context import LatestObservation
from ludic_core.engine import RolloutEngine
from ludic_core.evaluation import Reducer
from ludic_core.inference import ChatClient, InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.parsing import ParseResult
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.rollout_settings import RolloutSettings
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy
from ludic_envs.run_defaults import tictactoe_run_defaults
from ludic_envs.tictactoe import Board, TicTacToeEnv, TicTacToeMoveEnv

# The game `ludic train tictactoe-grpo` plays, declared once with the env (the reasons are there).
_RUN_DEFAULTS = tictactoe_run_defaults()
SYSTEM_PROMPT: str = _RUN_DEFAULTS["system_prompt"]
REWARDS: dict[str, float] = _RUN_DEFAULTS["env_kwargs"]["rewards"]
(MOVE_STOP,) = _RUN_DEFAULTS["sampling"]["stop"]
MAX_MOVES: int = _RUN_DEFAULTS["rollout"]["max_steps"]
MAX_MOVE_TOKENS: int = _RUN_DEFAULTS["sampling"]["max_tokens"]

_STRICT_MOVE = re.compile(r"\s*<move>([ABC][123])</move>\s*")
_LEGAL_LIST = re.compile(r"Your move \(([A-C1-3, ]+)\)")


def move_parser(text: str) -> ParseResult:
    """Exactly one tagged cell (surrounding whitespace allowed) is a move; anything else is a parse
    failure with reward -1, which ends the game (``stop_on_parse_error``)."""
    match = _STRICT_MOVE.fullmatch(text)
    if match:
        return ParseResult(action=match.group(1), reward=0.0)
    return ParseResult(action=None, reward=-1.0, obs="Reply with one free cell such as <move>B2</move>.")


OUTCOMES = ("win", "draw", "loss", "illegal", "parse_error", "unfinished")


def make_env(
    opponent: str = "random",
    agent_mark: str = "random",
    start_board: str | None = None,
    optimal_prob: float = 0.5,
) -> TicTacToeEnv:
    return TicTacToeEnv(
        opponent=opponent,
        optimal_prob=optimal_prob,
        agent_mark=agent_mark,  # type: ignore[arg-type]
        rewards=REWARDS,
        show_opponent_move=False,
        start_board=start_board,
    )


def make_agent(
    client: ChatClient, *, chat_template: ChatTemplate | None = None, system_prompt: str = SYSTEM_PROMPT
) -> Agent:
    """The examples' player: the strict move parser and board-only prompts (the system prompt and the
    latest board)."""
    return Agent(
        client=client,
        parser=move_parser,
        chat_template=chat_template,
        context=LatestObservation(system_prompt=system_prompt),
        # A reply cut by max_tokens is malformed anyway; the strict parser says so.
        reject_incomplete_completions=False,
    )


def make_engine(
    client: ChatClient,
    *,
    opponent: str = "random",
    agent_mark: str = "random",
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    rollout_log: str | None = None,
    chat_template: ChatTemplate | None = None,
) -> RolloutEngine:
    """An engine whose episodes pit an ``Agent`` (strict ``<move>..</move>`` parser, board-only
    prompts) against a bot. Requests name the env ``"tictactoe"``; an ``EnvSpec`` may pass
    ``start_board`` to play from a fixed position (see :func:`position_requests`).

    ``chat_template`` renders and tokenizes the prompt; by default the client's own tokenizer does
    (``LocalPolicyClient`` and ``TinkerChatClient`` carry one; a ``VLLMClient`` or a scripted teacher
    does not). An ``EnvSpec`` may also name its own ``opponent`` and ``optimal_prob`` (see
    :func:`grpo_requests`); ``opponent`` is the default."""

    default_opponent = opponent

    def env(
        start_board: str | None = None, opponent: str = default_opponent, optimal_prob: float = 0.5
    ) -> TicTacToeEnv:
        return make_env(opponent, agent_mark, start_board, optimal_prob)

    def one_move(start_board: str | None = None) -> TicTacToeMoveEnv:
        return TicTacToeMoveEnv(
            agent_mark=agent_mark,  # type: ignore[arg-type]
            rewards=REWARDS,
            show_opponent_move=False,
            start_board=start_board,
        )

    def protocol() -> SingleAgentProtocol:
        agent = make_agent(client, chat_template=chat_template, system_prompt=system_prompt)
        return SingleAgentProtocol(agent, stop_on_parse_error=True)

    return RolloutEngine(
        env_factories={"tictactoe": env, "tictactoe_move": one_move},
        protocol_factories={"ttt_agent": protocol},
        base_seed=seed,
        rollout_log=rollout_log,
    )


def rollout_settings(max_steps: int) -> RolloutSettings:
    """How the examples run games: all of a step's games in flight at once, so a local policy client
    batches their model calls into one forward pass per turn."""
    return RolloutSettings(max_steps=max_steps, concurrency=256)


def inference_spec(*, temperature: float, logprobs: bool, max_tokens: int = MAX_MOVE_TOKENS) -> InferenceSpec:
    return InferenceSpec(
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, stop=(MOVE_STOP,)),
        return_=ReturnSpec(return_chosen_logprobs=logprobs),
    )


@attrs.frozen
class TrainingGames:
    """Which games GRPO trains on. Evaluation always plays from the empty board against the random
    opponent; training may differ, to keep the signal alive:

    * ``opponent``/``optimal_prob``: who the agent trains against. Against a random opponent most
      blunders go unpunished, so they earn the same reward as the best move and GRPO cannot tell them
      apart; a ``"mixed"`` opponent (the perfect move with probability ``optimal_prob``) punishes them.
    * ``start_share``: the share of groups that start from a position reached by 1 to
      ``max_start_plies`` random plies instead of the empty board (the agent plays the side to move).
      Games from the empty board visit few positions once the policy settles; varied starts keep
      every kind of position in the batch, and shorter games cost fewer turns.

    Rewards stay the game outcome (:data:`REWARDS`): nothing tells the agent which move was best."""

    opponent: str = "random"
    optimal_prob: float = 0.5
    start_share: float = 0.0
    max_start_plies: int = 6

    def env_spec(self, rng: random.Random) -> EnvSpec:
        kwargs: dict[str, Any] = {}
        if self.opponent != "random":
            kwargs.update(opponent=self.opponent, optimal_prob=self.optimal_prob)
        start = random_start(rng, share=self.start_share, max_plies=self.max_start_plies)
        if start is not None:
            kwargs["start_board"] = start
        return EnvSpec("tictactoe", kwargs=kwargs)


@attrs.frozen
class TrainingPositions:
    """GRPO on single decisions instead of games: each group is one undecided position after 0 to
    ``max_plies`` random plies (:func:`random_position`), and each reply is paid the outcome perfect play
    reaches after it (:class:`~ludic_envs.tictactoe.TicTacToeMoveEnv`): win 1, draw 0.5, loss 0,
    illegal or malformed -1. Every move gets its own verdict, where a game's outcome pays a whole
    game of moves alike."""

    max_plies: int = 7

    def env_spec(self, rng: random.Random) -> EnvSpec:
        position = random_position(rng, plies=rng.randint(0, self.max_plies))
        return EnvSpec("tictactoe_move", kwargs={"start_board": position})


def random_start(rng: random.Random, *, share: float, max_plies: int = 6) -> str | None:
    """A GRPO group's start: with probability ``share`` a position after 1 to ``max_plies`` random
    plies (:func:`random_position`), else ``None`` (the empty board). Draws nothing when ``share`` is 0."""
    if share and rng.random() < share:
        return random_position(rng, plies=rng.randint(1, max_plies))
    return None


def random_position(rng: random.Random, *, plies: int) -> str:
    """A position after ``plies`` random moves from the empty board (fewer if a game would end: the
    position returned is always undecided)."""
    board = Board()
    for _ in range(plies):
        after = board.play(rng.choice(board.legal_moves()))
        if after.over:
            break
        board = after
    return board.compact()


def grpo_requests(
    *,
    group_size: int,
    groups_per_step: int,
    temperature: float,
    seed: int,
    max_tokens: int = MAX_MOVE_TOKENS,
    games: TrainingGames | TrainingPositions = TrainingGames(),
) -> Callable[[int], list[RolloutRequest]]:
    """``step -> requests``: ``groups_per_step`` games, each played ``group_size`` times (same env seed
    and start, so the same side and the same opponent dice; different sampling seeds). ``games`` says
    which games (:class:`TrainingGames`), or single decisions (:class:`TrainingPositions`). A pure
    function of the step, so resumed runs replay the same requests."""
    spec = inference_spec(temperature=temperature, logprobs=True, max_tokens=max_tokens)

    def requests(step: int) -> list[RolloutRequest]:
        strategy = GRPORequestStrategy(group_size=group_size, seed=derive_seed(seed, "train", step))
        starts = random.Random(derive_seed(seed, "train-starts", step))
        bases = [
            RolloutRequest(env=games.env_spec(starts), protocol=ProtocolSpec("ttt_agent"), inference=spec)
            for _ in range(groups_per_step)
        ]
        return strategy.expand(bases)

    return requests


def eval_requests(
    *, episodes: int, temperature: float = 0.0, seed: int, max_tokens: int = MAX_MOVE_TOKENS
) -> list[RolloutRequest]:
    """Fixed env and sampling seeds: evaluations of different checkpoints play against the same
    opponent dice, so their per-game outcomes can be compared pair by pair."""
    spec = inference_spec(temperature=temperature, logprobs=False, max_tokens=max_tokens)
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


def sample_positions(count: int, *, seed: int) -> list[str]:
    """``count`` distinct undecided positions (either side to move) reached by random play from the
    empty board, in a seeded order: a fixed test set for scoring single decisions against the solver."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    attempts = 0
    while len(seen) < count:
        attempts += 1
        if attempts > 100_000:
            raise ValueError(f"could not find {count} distinct positions (found {len(seen)})")
        board = Board()
        for _ in range(rng.randrange(0, 8)):
            moves = board.legal_moves()
            if not moves:
                break
            board = board.play(rng.choice(moves))
        if not board.over:
            seen.setdefault(board.compact())
    return list(seen)


def position_requests(
    positions: Sequence[str], *, seed: int, max_tokens: int = MAX_MOVE_TOKENS
) -> list[RolloutRequest]:
    """One greedy decision per position (run with ``max_steps=1``); the env's ``move_was_optimal``
    says whether the move keeps the best outcome perfect play can reach."""
    spec = inference_spec(temperature=0.0, logprobs=False, max_tokens=max_tokens)
    return [
        RolloutRequest(
            env=EnvSpec("tictactoe", kwargs={"start_board": position}),
            protocol=ProtocolSpec("ttt_agent"),
            env_seed=derive_seed(seed, "position-env", i),
            sampling_seed=derive_seed(seed, "position-sampling", i),
            inference=spec,
        )
        for i, position in enumerate(positions)
    ]


def legal_moves_in_prompt(prompt: str) -> list[str]:
    """The free cells listed in the last board of a rendered prompt (``Your move (A1, B2, ...)``)."""
    found = _LEGAL_LIST.findall(prompt)
    if not found:
        raise ValueError(f"no 'Your move (...)' list in the prompt: {prompt[-200:]!r}")
    return [cell.strip() for cell in found[-1].split(",") if cell.strip()]


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


def game_points(record: dict[str, Any]) -> float:
    """Win 1, draw 0.5, anything else 0: the score compared pair by pair between evaluations."""
    return {"win": 1.0, "draw": 0.5}.get(outcome(record), 0.0)


def outcome_reducers() -> Sequence[Reducer]:
    reducers = [Reducer(f"{name}_rate", _is(name), "rate", "rollouts") for name in OUTCOMES]
    reducers.append(Reducer("reward_mean", "total_reward", "mean", "rollouts"))
    return reducers


def position_reducers() -> Sequence[Reducer]:
    """Legal-move and optimal-move rates over single decisions (a malformed reply counts as neither)."""
    return [
        Reducer("legal_move_rate", _legal_move, "rate", "rollouts"),
        Reducer("optimal_move_rate", optimal_move, "rate", "rollouts"),
        Reducer("parse_error_rate", "parse_error", "rate", "rollouts"),
    ]


def _legal_move(record: dict[str, Any]) -> bool:
    return bool(record.get("reached_env")) and not record.get("illegal_reason")


def optimal_move(record: dict[str, Any]) -> bool:
    """Whether a one-decision record (:func:`position_requests`) played a legal move that keeps the
    best outcome perfect play can reach."""
    return _legal_move(record) and bool(record.get("move_was_optimal"))


def _is(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda record: outcome(record) == name
