"""The command-line flags of ``ludic eval`` and ``ludic rollouts``: each given flag sets one field of
the run config (:mod:`ludic_core.run.configs`); ``key=value`` overrides reach every other field."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

__all__ = ["add_run_arguments", "flags_of"]

# flag dest -> config path: only flags given on the command line reach the config.
_FLAG_PATHS: dict[str, tuple[str, ...]] = {
    "env": ("env",),
    "model": ("backend", "model"),
    "backend": ("backend", "kind"),
    "base_url": ("backend", "base_urls"),
    "episodes": ("episodes",),
    "samples_per_prompt": ("samples_per_prompt",),
    "seed": ("seed",),
    "concurrency": ("rollout", "concurrency"),
    "workers": ("rollout", "workers"),
    "temperature": ("sampling", "temperature"),
    "max_tokens": ("sampling", "max_tokens"),
    "run_dir": ("run_dir",),
}


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", nargs="?", help="a registered env (see `ludic envs`)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. sampling.temperature=0.7 env_kwargs.opponent=minimax",
    )
    parser.add_argument("--config", action="append", default=[], help="a TOML run config (repeatable)")
    parser.add_argument(
        "--backend",
        help="a registered backend: openai: any OpenAI-compatible server (vLLM, SGLang, hosted); vllm: the same (vLLM speaks the "
        "OpenAI API; `ludic serve` starts one); local: in-process model (ludic-train); tinker (ludic-tinker)",
    )
    parser.add_argument("--model", help="served model name (openai), model dir or `tiny` (local)")
    parser.add_argument(
        "--base-url",
        action="append",
        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1; repeat it for several servers "
        "serving the same model (each request goes to the least busy one)",
    )
    parser.add_argument("-n", "--episodes", type=int, help="number of prompts (env seeds)")
    parser.add_argument("-k", "--samples-per-prompt", type=int, help="samples per prompt (pass@k groups)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--concurrency", type=int, help="episodes in flight")
    parser.add_argument(
        "--workers", type=int, help="processes the episodes run in (default 1; more for CPU-bound envs)"
    )
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument(
        "--run-dir", help="where config, versions and episodes go (default runs/<cmd>-<env>-<time>)"
    )


def flags_of(args: argparse.Namespace, extra: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The flags given on the command line as a nested config dict."""
    flags: dict[str, Any] = {}
    for dest, path in {**_FLAG_PATHS, **(extra or {})}.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        node = flags
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return flags
