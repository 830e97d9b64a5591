"""The recipes ludic-train registers for ``ludic train`` (entry-point group ``"ludic.recipes"``).

Each function returns a :class:`~ludic_core.cli.recipes.Recipe`: a run config class and this recipe's
defaults for it. Nothing here imports torch: the runners in :mod:`.rl` and :mod:`.sft` are imported
only when a recipe runs. The CPU smoke configs are under ``examples/`` (``*_smoke.toml``).
"""

from __future__ import annotations

from typing import Any

from ludic_core.cli.recipes import Recipe
from ludic_core.cli.rl_recipe import TICTACTOE_RL_DEFAULTS
from ludic_train.recipes.config import (
    FROM_TOKENIZER,
    OfflineRLRunConfig,
    PipelineRunConfig,
    RLRunConfig,
    SFTRunConfig,
)

__all__ = [
    "gsm8k_grpo",
    "gsm8k_gspo",
    "offline_rl",
    "pipeline_actor",
    "pipeline_learner",
    "tictactoe_grpo",
    "tictactoe_sft",
]

_RL = "ludic_train.recipes.rl:run_rl"
_LOCAL_SMOLLM2 = {"kind": "local", "model": "smollm2"}
_RL_CHECK = "ludic_train.recipes.rl:check_rl"


def _trainer(**settings: Any) -> dict[str, Any]:
    """The ``[trainer]`` defaults: TrainerConfig requires ``pad_token_id``, which the recipes take from
    the tokenizer (``-1``), so a TOML file need not state it. The micro-batch token budget is derived
    from the model and the machine (:mod:`ludic_train.memory_budget`) unless the config sets it."""
    return {"pad_token_id": FROM_TOKENIZER, **settings}


def tictactoe_grpo() -> Recipe:
    return Recipe(
        summary="GRPO + LoRA on Tic-Tac-Toe against a random opponent, sampled in-process (local backend)",
        config_class=RLRunConfig,
        runner=_RL,
        check=_RL_CHECK,
        defaults={
            **TICTACTOE_RL_DEFAULTS,
            "backend": _LOCAL_SMOLLM2,
            "trainer": _trainer(lr=5e-5, max_grad_norm=0.5, eval_every_steps=10),
            "eval_episodes": 100,
        },
    )


def tictactoe_sft() -> Recipe:
    return Recipe(
        summary="SFT on rollouts (e.g. winning Tic-Tac-Toe games from `ludic rollouts --keep`)",
        config_class=SFTRunConfig,
        runner="ludic_train.recipes.sft:run_sft",
        check="ludic_train.recipes.sft:check_sft",
        defaults={"model": "smollm2", "trainer": _trainer(lr=2e-5, publish_every_steps=0)},
    )


def offline_rl() -> Recipe:
    return Recipe(
        summary="RL (grpo by default) on collected token-level rollouts, e.g. `ludic rollouts -k 8` from a vLLM server",
        config_class=OfflineRLRunConfig,
        runner="ludic_train.recipes.offline:run_offline_rl",
        check="ludic_train.recipes.offline:check_offline_rl",
        defaults={"model": "smollm2", "trainer": _trainer(lr=2e-5, publish_every_steps=0)},
    )


def _gsm8k(algorithm: str, summary: str) -> Recipe:
    return Recipe(
        summary=summary,
        config_class=RLRunConfig,
        runner=_RL,
        check=_RL_CHECK,
        defaults={
            "env": "gsm8k",
            "env_kwargs": {"split": "train"},
            "eval_env_kwargs": {"split": "test"},
            "eval_episodes": 200,
            "backend": _LOCAL_SMOLLM2,
            "episodes": 4,
            "samples_per_prompt": 8,
            "rollout": {"max_steps": 1},
            "algorithm": algorithm,
            "sampling": {"max_tokens": 256},
            "trainer": _trainer(lr=1e-5, max_seq_len=1024, eval_every_steps=10),
        },
    )


def gsm8k_grpo() -> Recipe:
    return _gsm8k("grpo", "GRPO + LoRA on GSM8K (one-shot answers graded by the env), local backend")


def gsm8k_gspo() -> Recipe:
    return _gsm8k("gspo", "GSPO (sequence-level ratios) + LoRA on GSM8K, local backend")


def _pipeline(role: str, summary: str) -> Recipe:
    return Recipe(
        summary=summary,
        config_class=PipelineRunConfig,
        runner=f"ludic_train.recipes.pipeline:run_{role}",
        check="ludic_train.recipes.pipeline:check_pipeline",
        defaults={
            **TICTACTOE_RL_DEFAULTS,
            "backend": _LOCAL_SMOLLM2,
            "trainer": _trainer(lr=5e-5, max_grad_norm=0.5, max_lag=2),
        },
    )


def pipeline_actor() -> Recipe:
    return _pipeline(
        "actor", "pipeline RL actor: sample Tic-Tac-Toe GRPO groups, push them to Redis (ludic-train[redis])"
    )


def pipeline_learner() -> Recipe:
    return _pipeline(
        "learner", "pipeline RL learner: train on the actors' batches from Redis, publish weights"
    )
