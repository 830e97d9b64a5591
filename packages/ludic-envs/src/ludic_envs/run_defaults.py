"""What every ``ludic train`` recipe on this package's envs starts from, by env name (``ludic.run_defaults``
entry points, :func:`ludic_core.run.recipes.env_run_defaults`)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "CALCULATOR_SYSTEM_PROMPT",
    "gsm8k_run_defaults",
    "sum_of_products_run_defaults",
    "tictactoe_run_defaults",
    "tictactoe_selfplay_run_defaults",
]

CALCULATOR_SYSTEM_PROMPT = (
    "You answer arithmetic questions exactly. Use the calculator: write "
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34 + 5"}}</tool_call> '
    "and its result comes back. Then reply with the final number only."
)
"""The system prompt of the calculator tool-use task (:func:`sum_of_products_run_defaults`)."""


def tictactoe_run_defaults() -> dict[str, Any]:
    """GRPO against the random opponent on either side (drawn from the env seed, so a GRPO group always
    plays one side), the opponent's move shown on the board only."""
    # Outcome rewards only: a per-move bonus would pay for winning slowly. A draw pays the same whether
    # or not a win was available: against a random opponent the wins pay for that.
    rewards = {"win": 1.0, "forced_draw": 0.5, "unforced_draw": 0.5, "loss": 0.0, "illegal_move": -1.0}
    prompt = "You play Tic-Tac-Toe. Reply with one free cell in move tags, for example <move>B2</move>."
    return {
        "env_kwargs": {
            "opponent": "random",
            "agent_mark": "random",
            "show_opponent_move": False,
            "rewards": rewards,
        },
        "system_prompt": prompt,
        # Generation stops at the closing tag: nothing after the move is sampled, rewarded or trained on.
        # "<move>B2</move>" is 8 SmolLM2 tokens; two spare for a leading space or newline.
        "sampling": {"temperature": 1.0, "max_tokens": 10, "stop": ["</move>"]},
        "episodes": 4,
        "samples_per_prompt": 8,
        "rollout": {"max_steps": 5},  # the agent's moves in a game against a bot: five at most
        "algorithm": "grpo",
    }


def tictactoe_selfplay_run_defaults() -> dict[str, Any]:
    """Self-play GRPO: one policy in both seats (``protocol = "multi_agent"``), each seat's rollouts
    compared only with that seat's in the group; the game, prompt and sampling of ``tictactoe``, each
    prompt showing only the system prompt and the current board. A game's result is each seat's
    reward, and a forfeit (the other seat's illegal move) is a win."""
    game = tictactoe_run_defaults()
    return {
        "env_kwargs": {
            "show_opponent_move": False,
            "rewards": {**game["env_kwargs"]["rewards"], "opponent_forfeit": 1.0},
        },
        "protocol": "multi_agent",
        # Board-only prompts: the board is the whole state, and a full dialog would grow every seat's
        # prompt turn by turn (and let the policy copy its own earlier replies).
        "agent_kwargs": {"context": "latest_observation"},
        "system_prompt": game["system_prompt"],
        "sampling": game["sampling"],
        "episodes": 4,
        "samples_per_prompt": 8,
        "rollout": {"max_steps": 9},  # both seats together never move more than nine times
        "algorithm": "grpo",
    }


def sum_of_products_run_defaults() -> dict[str, Any]:
    """Tool use: "Compute 347 × 28 + 905 × 613." (two products of factors in [12, 999], more than a
    small model computes in its head) with a calculator. The agent is ludic-agents' ``tool_chat``
    with the ``calculator`` tool in the Hermes call format and ChatML prompts listing the tool; one
    episode is one turn of up to three model calls (call the tool, read its result, answer), trained
    as one token sequence. Rewards: 1 for the exact sum, 0 for a wrong one, -1 for a reply or tool
    call that cannot be read (the eval profile's bare-number parser)."""
    return {
        "env_kwargs": {"num_parts": 2, "min_factor": 12, "max_factor": 999},
        "agent": "tool_chat",
        "agent_kwargs": {
            "tools": ["calculator"],
            "tool_parser": "hermes",
            "chat_template": "chatml_tools",
            "max_calls_per_turn": 3,  # one tool call and the answer, with one spare call
            # A call cut by max_tokens is unreadable anyway; the tool parser or the answer parser says so.
            "reject_incomplete_completions": False,
        },
        "system_prompt": CALCULATOR_SYSTEM_PROMPT,
        "sampling": {"temperature": 1.0, "max_tokens": 64},  # the longest teacher call: 43 SmolLM2 tokens
        "episodes": 4,
        "samples_per_prompt": 8,
        "rollout": {"max_steps": 1},
        "algorithm": "grpo",
    }


def gsm8k_run_defaults() -> dict[str, Any]:
    """GRPO on one-shot answers graded by the env, trained on the train split and evaluated on the
    test split; each backend's recipe adds its model's sampling budget and evaluation size."""
    return {
        "env_kwargs": {"split": "train"},
        "eval_env_kwargs": {"split": "test"},
        "episodes": 4,
        "samples_per_prompt": 8,
        "rollout": {"max_steps": 1},
        "algorithm": "grpo",
    }
