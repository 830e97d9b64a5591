"""Where an RL recipe's episodes are sampled from: the one seam between the Trainer and its sampler.

The RL runner (:func:`ludic_train.recipes.rl.run_rl`) builds the model being trained, then asks a
:data:`SamplerOpener` for a :class:`Sampler` around it: the token-level backend the rollout engine
samples through, the publisher the Trainer pushes its weights to (``version = trainer step``), and
what the sampler holds open. :func:`open_local_sampler` (the default) samples in-process from the
model itself; other packages pass their own opener (ludic-vllm's vLLM recipes sample from a vLLM
server and publish over Gloo, NCCL or files), so the Trainer side of a recipe exists once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from ludic_core.cli.backends import Backend, ClientBackend, TokenizedClient
from ludic_core.publisher import PolicyPublisher
from ludic_train.recipes.config import RLRunConfig

__all__ = ["ClientBackend", "Sampler", "SamplerOpener", "TokenizedClient", "open_local_sampler"]


async def _nothing_to_close() -> None:
    return None


@attrs.frozen(kw_only=True)
class Sampler:
    """``backend``: the token-level backend the engine's agents sample through; ``publisher``: where
    the Trainer publishes (the Trainer closes it), None on the torchrun ranks other than 0 (rank 0
    alone sends the weights); ``description``: one line for ``--dry-run``, saying what was built and
    what was not contacted; ``close``: release what the opener started (a server, an exported model),
    after the backend is closed."""

    backend: Backend
    publisher: PolicyPublisher | None
    description: str
    close: Callable[[], Awaitable[None]] = _nothing_to_close

    async def aclose(self) -> None:
        try:
            await self.backend.aclose()
        finally:
            await self.close()


class SamplerOpener(Protocol):
    """``(config, model, tokenizer, run_dir=, dry_run=) -> Sampler``; with ``dry_run`` the opener
    builds and validates what it can without starting or contacting anything that may wait."""

    def __call__(
        self, config: RLRunConfig, model: Any, tokenizer: Any, *, run_dir: Path, dry_run: bool
    ) -> Awaitable[Sampler]: ...


async def open_local_sampler(
    config: RLRunConfig, model: Any, tokenizer: Any, *, run_dir: Path, dry_run: bool
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
