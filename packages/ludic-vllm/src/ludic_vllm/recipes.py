"""The recipes ludic-vllm registers for ``ludic train`` (entry-point group ``"ludic.recipes"``):
ludic-train's RL recipes with their episodes sampled by a vLLM server (see :mod:`ludic_vllm.rl_recipe`).

``tictactoe-grpo-vllm`` and ``gsm8k-grpo-vllm`` take the defaults of ludic-train's ``tictactoe-grpo``
and ``gsm8k-grpo`` (one owner for the env, sampling and trainer settings) and add the ``[vllm]`` table.
They train with ludic-train's Trainer, which ludic-vllm does not depend on: asking for one without
ludic-train installed raises an error that says what to install; listing them imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ludic_core.cli.recipes import Recipe
from ludic_core.errors import ConfigError, MissingExtraError

__all__ = ["gsm8k_grpo_vllm", "tictactoe_grpo_vllm"]

NEEDS_TRAINER = (
    "the *-vllm recipes train with ludic-train's Trainer and publish with ludic-vllm's publishers: "
    'pip install ludic-train "ludic-vllm[publisher]"'
)

_BACKEND = {"kind": "vllm", "model": "smollm2"}


def _vllm_recipe(local: str, summary: str) -> Recipe:
    """ludic-train's recipe ``local`` (a function of :mod:`ludic_train.recipes`) sampled by vLLM."""
    try:
        import ludic_train.recipes as local_recipes
        from ludic_vllm.rl_recipe import VLLMRLRunConfig
    except MissingExtraError as exc:
        raise ConfigError(str(exc)) from exc
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("ludic_train", "torch", "safetensors"):
            raise ConfigError(f"{NEEDS_TRAINER} ({exc})") from exc
        raise
    make: Callable[[], Recipe] = getattr(local_recipes, local)
    defaults: dict[str, Any] = {**make().defaults, "backend": _BACKEND}
    return Recipe(
        summary=summary,
        config_class=VLLMRLRunConfig,
        runner="ludic_vllm.rl_recipe:run_rl_vllm",
        check="ludic_vllm.rl_recipe:check_rl_vllm",
        defaults=defaults,
    )


def tictactoe_grpo_vllm() -> Recipe:
    return _vllm_recipe(
        "tictactoe_grpo",
        "GRPO + LoRA on Tic-Tac-Toe, trained here, sampled by a vLLM server that gets the weights every step",
    )


def gsm8k_grpo_vllm() -> Recipe:
    return _vllm_recipe(
        "gsm8k_grpo",
        "GRPO + LoRA on GSM8K, trained here, sampled by a vLLM server that gets the weights every step",
    )
