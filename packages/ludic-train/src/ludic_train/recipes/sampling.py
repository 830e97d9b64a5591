"""The ``local`` sampler (entry-point group ``ludic.samplers``): the Trainer trains the model here
(:func:`ludic_train.recipes.rl.run_rl`), which samples its own episodes in-process; other kinds extend
it (ludic-vllm's ``vllm``), and the runner opens theirs instead."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ludic_core.run.backends import ClientBackend
from ludic_core.run.samplers import Sampler, SamplerKind
from ludic_train.recipes.config import FROM_TOKENIZER, RLRunConfig

__all__ = ["local_sampler", "open_local_sampler"]


def local_sampler() -> SamplerKind:
    return SamplerKind(
        summary="the Trainer trains the model here; the model samples its own episodes in-process",
        config_class=RLRunConfig,
        runner="ludic_train.recipes.rl:run_rl",
        checks=("ludic_train.recipes.rl:check_rl",),
        open="ludic_train.recipes.sampling:open_local_sampler",
        # TrainerConfig requires pad_token_id, which the recipes take from the tokenizer.
        defaults={"trainer": {"pad_token_id": FROM_TOKENIZER}},
    )


async def open_local_sampler(
    config: RLRunConfig,
    model: Any,
    tokenizer: Any,
    *,
    run_dir: Path,
    dry_run: bool,
    export: Callable[[Path], None],
) -> Sampler:
    """The model samples its own episodes in-process (:class:`~ludic_train.local_client.LocalPolicyClient`,
    batching up to ``backend.max_concurrency`` sequences); publishing only moves its policy version,
    since the sampler shares the trainer's parameters."""
    from ludic_train.local_client import LocalPolicyClient

    client = LocalPolicyClient(
        model, tokenizer, seed=config.seed, max_batch_size=config.backend.max_concurrency
    )
    return Sampler(
        backend=ClientBackend(client),
        publisher=client.as_publisher(),
        description=f"in-process LocalPolicyClient (batches up to {config.backend.max_concurrency})",
    )
