"""What every ``ludic train`` recipe on this package's envs starts from, by env name (``ludic.run_defaults``
entry points, :func:`ludic_core.run.recipes.env_run_defaults`)."""

from __future__ import annotations

from typing import Any

__all__ = ["gsm8k_run_defaults", "tictactoe_run_defaults"]


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
