"""The recipes ludic-train registers for ``ludic train`` (entry-point group ``"ludic.recipes"``).

Each function returns a :class:`~ludic_core.run.recipes.Recipe`: its defaults (over its env's registered
run defaults, :func:`~ludic_core.run.recipes.env_run_defaults`) and, unless the recipe is trained where
``backend.kind`` says (the RL recipes: ``local``, ``vllm``, ``tinker``, or any registered sampler), its
run config class. Nothing here imports torch: the runners in :mod:`.rl` and :mod:`.sft` are imported only
when a recipe runs. The CPU smoke configs are under ``examples/`` (``*_smoke.toml``).
"""

from __future__ import annotations

from typing import Any

from ludic_core.run.recipes import Recipe, env_run_defaults
from ludic_train.recipes.config import OfflineRLRunConfig, PipelineRunConfig, SFTRunConfig

__all__ = [
    "calculator_tool_use",
    "gsm8k_grpo",
    "gsm8k_gspo",
    "offline_rl",
    "pipeline_actor",
    "pipeline_learner",
    "tictactoe_grpo",
    "tictactoe_selfplay",
    "tictactoe_sft",
]

_LOCAL_SMOLLM2 = {"kind": "local", "model": "smollm2"}


def _warm_started_local(
    teacher: str, *, episodes: int, steps: int, max_concurrency: int, eval_episodes: int, **trainer: Any
) -> dict[str, Any]:
    """The ``local`` defaults of a recipe that first runs SFT on ``episodes`` games of the scripted
    ``teacher`` for ``steps`` steps, then GRPO; both train a rank-16 LoRA of smollm2."""
    return {
        "backend": {"model": "smollm2", "max_concurrency": max_concurrency},
        "trainer": {"lr": 1e-3, "max_grad_norm": 1.0, "micro_token_budget": 2048, **trainer},
        "lora": {"rank": 16},
        "warm_start": {"teacher": teacher, "episodes": episodes, "steps": steps, "lr": 2e-3},
        "eval_episodes": eval_episodes,
    }


def tictactoe_grpo() -> Recipe:
    return Recipe(
        summary="GRPO + LoRA on Tic-Tac-Toe against a random opponent (backend.kind: local, vllm, tinker)",
        defaults={
            **env_run_defaults("tictactoe"),
            "backend": {"kind": "local"},
            "trainer": {"eval_every_steps": 10},
        },
        backend_defaults={
            "local": {
                "backend": {"model": "smollm2"},
                "trainer": {"lr": 5e-5, "max_grad_norm": 0.5},
                "eval_episodes": 100,
            },
        },
    )


def tictactoe_selfplay() -> Recipe:
    return Recipe(
        summary="self-play GRPO + LoRA on Tic-Tac-Toe: one policy in both seats, each seat's games grouped "
        "apart, after an SFT warm start on a rules-only teacher's games",
        defaults={
            **env_run_defaults("tictactoe_selfplay"),
            "backend": {"kind": "local"},
            "trainer": {"eval_every_steps": 10},
        },
        backend_defaults={
            "local": _warm_started_local(
                "tictactoe_rules", episodes=64, steps=20, max_concurrency=64, eval_episodes=100
            ),
        },
    )


def calculator_tool_use() -> Recipe:
    return Recipe(
        summary="tool use: a calculator for sums of products, SFT warm start on a scripted teacher then GRPO + LoRA",
        defaults={
            **env_run_defaults("sum_of_products"),
            "steps": 12,
            "backend": {"kind": "local"},
            "trainer": {"eval_every_steps": 6},
        },
        backend_defaults={
            # Without the warm start a small model never writes a readable tool call, and GRPO gets no signal.
            "local": _warm_started_local(
                "calculator", episodes=96, steps=12, max_concurrency=32, eval_episodes=200, max_seq_len=384
            ),
        },
    )


def tictactoe_sft() -> Recipe:
    return Recipe(
        summary="SFT on rollouts (e.g. winning Tic-Tac-Toe games from `ludic rollouts --keep`)",
        config_class=SFTRunConfig,
        runner="ludic_train.recipes.sft:run_sft",
        checks=("ludic_train.recipes.sft:check_sft",),
        defaults={"model": "smollm2"},
    )


def offline_rl() -> Recipe:
    return Recipe(
        summary="RL (grpo by default) on collected token-level rollouts, e.g. `ludic rollouts -k 8` from a vLLM server",
        config_class=OfflineRLRunConfig,
        runner="ludic_train.recipes.offline:run_offline_rl",
        checks=("ludic_train.recipes.offline:check_offline_rl",),
        defaults={"model": "smollm2"},
    )


def _gsm8k(algorithm: str, summary: str) -> Recipe:
    return Recipe(
        summary=f"{summary} (backend.kind: local, vllm, tinker)",
        defaults={
            **env_run_defaults("gsm8k"),
            "algorithm": algorithm,
            "eval_episodes": 200,
            "backend": {"kind": "local"},
            "trainer": {"eval_every_steps": 10},
        },
        backend_defaults={
            "local": {
                "backend": {"model": "smollm2"},
                "sampling": {"max_tokens": 256},
                "trainer": {"lr": 1e-5, "max_seq_len": 1024},
            },
            "tinker": {"sampling": {"max_tokens": 512}},
        },
    )


def gsm8k_grpo() -> Recipe:
    return _gsm8k("grpo", "GRPO + LoRA on GSM8K (one-shot answers graded by the env)")


def gsm8k_gspo() -> Recipe:
    return _gsm8k("gspo", "GSPO (sequence-level ratios) + LoRA on GSM8K")


def _pipeline(role: str, summary: str) -> Recipe:
    return Recipe(
        summary=summary,
        config_class=PipelineRunConfig,
        runner=f"ludic_train.recipes.pipeline:run_{role}",
        checks=("ludic_train.recipes.pipeline:check_pipeline",),
        defaults={
            **env_run_defaults("tictactoe"),
            "backend": _LOCAL_SMOLLM2,
            "trainer": {"lr": 5e-5, "max_grad_norm": 0.5, "max_lag": 2},
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
