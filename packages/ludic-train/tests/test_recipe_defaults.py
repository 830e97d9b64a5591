"""The RL recipes' run configs come from their env's registered run defaults (ludic-envs,
``ludic.run_defaults``) under the recipe's and the backend's own: ``ludic train tictactoe-grpo`` on its
CPU smoke config resolves to exactly this config, the one ``--dry-run`` prints."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from ludic_core.run.loading import to_json
from ludic_train.train_command import resolve

pytest.importorskip("ludic_envs")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SMOKE = EXAMPLES / "tic_tac_toe" / "grpo_smoke.toml"

TICTACTOE_GRPO_SMOKE = {
    "seed": 0,
    "run_dir": "",
    "env": "tictactoe",
    "env_kwargs": {
        "opponent": "random",
        "agent_mark": "random",
        "show_opponent_move": False,
        "rewards": {"win": 1.0, "forced_draw": 0.5, "unforced_draw": 0.5, "loss": 0.0, "illegal_move": -1.0},
    },
    "protocol": "single_agent",
    "agent": "chat",
    "agent_kwargs": {},
    "backend": {
        "kind": "local",
        "model": "tiny",
        "base_urls": ["http://localhost:8000/v1"],
        "api_key_env": "OPENAI_API_KEY",
        "max_concurrency": 32,
        "request_timeout_s": 600.0,
        "max_retries": 4,
        "device": "cpu",
        "tokenizer": "",
    },
    "episodes": 2,
    "samples_per_prompt": 2,
    "rollout": {
        "max_steps": 5,
        "concurrency": 32,
        "timeout_s": 600.0,
        "episode_timeout_s": 1800.0,
        "on_failure": "continue",
        "max_failure_rate": 0.5,
        "workers": 1,
    },
    "vary_starts": True,
    "system_prompt": "You play Tic-Tac-Toe. Reply with one free cell in move tags, for example <move>B2</move>.",
    "steps": 2,
    "algorithm": "grpo",
    "algorithm_kwargs": {},
    "sampling": {"temperature": 1.0, "max_tokens": 10, "top_p": 1.0, "stop": ["</move>"]},
    "eval_episodes": 4,
    "eval_env_kwargs": None,
    "trainer": {
        "pad_token_id": -1,
        "device": None,
        "optimizer": "adamw",
        "lr": 5e-05,
        "weight_decay": 0.01,
        "betas": [0.9, 0.999],
        "eps": 1e-08,
        "max_grad_norm": 0.5,
        "max_seq_len": 1024,
        "micro_token_budget": None,
        "publish_every_steps": 1,
        "cast_logits_to_fp32": False,
        "gradient_checkpointing": False,
        "share_prompt_prefix": True,
        "skip_zero_weight_items": True,
        "max_lag": None,
        "max_refills": 100,
        "log_every": 1,
        "eval_at_start": False,
        "eval_every_steps": 2,
        "max_consecutive_skipped_steps": 3,
    },
    "lora": {"rank": 8, "alpha": None, "dropout": 0.0, "include_lm_head": True, "top_layers": None},
    "run": {"checkpoint_every": 1, "max_to_keep": 2, "loggers": ["print", "jsonl"], "save_final": False},
    "warm_start": {"teacher": "", "episodes": 64, "steps": 20, "lr": 0.002, "batch_size": 16},
    "chat_template": None,
}


def test_tictactoe_grpo_smoke_config_resolves_to_the_same_config() -> None:
    args = argparse.Namespace(recipe="tictactoe-grpo", rest=[str(SMOKE)], resume=None)
    name, _recipe, config = resolve(args)
    assert name == "tictactoe-grpo"
    resolved = json.loads(json.dumps(to_json(config)))  # what --dry-run prints
    assert resolved == TICTACTOE_GRPO_SMOKE
    assert list(resolved) == list(TICTACTOE_GRPO_SMOKE)  # in the same order


def _resolved(recipe: str, smoke: str) -> dict[str, Any]:
    args = argparse.Namespace(recipe=recipe, rest=[str(EXAMPLES / smoke)], resume=None)
    _name, _recipe, config = resolve(args)
    resolved: dict[str, Any] = json.loads(json.dumps(to_json(config)))
    return resolved


def test_the_selfplay_recipe_seats_one_policy_in_both_seats_after_a_rules_teacher() -> None:
    config = _resolved("tictactoe-selfplay", "tic_tac_toe/selfplay_smoke.toml")
    assert (config["env"], config["protocol"], config["agent"]) == (
        "tictactoe_selfplay",
        "multi_agent",
        "chat",
    )
    assert config["env_kwargs"]["rewards"]["opponent_forfeit"] == 1.0
    assert config["warm_start"] == {
        "teacher": "tictactoe_rules",
        "episodes": 4,
        "steps": 2,
        "lr": 0.002,
        "batch_size": 4,
    }
    # The game, prompt and sampling are tictactoe-grpo's.
    game = _resolved("tictactoe-grpo", "tic_tac_toe/grpo_smoke.toml")
    assert (config["system_prompt"], config["sampling"]) == (game["system_prompt"], game["sampling"])


def test_the_tool_use_recipe_builds_the_calculator_agent_after_its_teacher() -> None:
    config = _resolved("calculator-tool-use", "calculator/tool_use_smoke.toml")
    assert (config["env"], config["protocol"], config["agent"]) == (
        "sum_of_products",
        "single_agent",
        "tool_chat",
    )
    assert config["agent_kwargs"] == {
        "tools": ["calculator"],
        "tool_parser": "hermes",
        "chat_template": "chatml_tools",
        "max_calls_per_turn": 3,
        "reject_incomplete_completions": False,
    }
    assert config["env_kwargs"] == {"num_parts": 2, "min_factor": 12, "max_factor": 999}
    assert config["warm_start"]["teacher"] == "calculator" and config["sampling"]["max_tokens"] == 96
