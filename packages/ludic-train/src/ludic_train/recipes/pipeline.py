"""The pipeline recipes: ``pipeline-actor`` (sample, credit, push to Redis) and ``pipeline-learner``
(claim, train, publish weights to a shared directory), separate processes on any number of machines.

    ludic train pipeline-learner run.toml run_dir=runs/learner pipeline.clear_queue=true
    ludic train pipeline-actor run.toml run_dir=runs/actor-0      # as many as you like

An actor samples with its own copy of the base model (the learner publishes merged weights under the
base model's names) and stops after ``pipeline.actor_batches`` batches or on Ctrl-C / SIGTERM, after
pushing the batch in flight. Under ``torchrun`` (FSDP2) each learner rank claims its own batches as
consumer ``learner-<rank>`` and resumes its own position; rank 0 publishes the weights and alone clears
the queue (``pipeline.clear_queue``) before any rank claims.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.run.ranks import launched_ranks
from ludic_core.run.rl import build_algorithm, check_envs_build, rollout_source
from ludic_train.recipes.config import PipelineRunConfig
from ludic_train.recipes.rl import check_rl

__all__ = ["check_pipeline", "run_actor", "run_learner"]


def check_pipeline(config: PipelineRunConfig) -> None:
    check_rl(config)
    if config.warm_start.teacher:
        raise ConfigError(
            f"warm_start.teacher = {config.warm_start.teacher!r}: the pipeline recipes have no warm start; "
            "warm up with the local recipe (run.save_final = true) and start the pipeline from its export "
            "(backend.model = <run_dir>/final)"
        )
    if not config.pipeline.redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"pipeline.redis_url = {config.pipeline.redis_url!r}: expected redis://host:port/db"
        )


async def _actor(config: PipelineRunConfig, run_dir: Path, *, dry_run: bool) -> dict[str, Any]:
    from ludic_core.pipeline import RedisPipelineActor
    from ludic_core.run.profiles import resolve_profile
    from ludic_train.cli_backend import LocalBackend, load_local_model
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.recipes.weight_files import DirectoryWeights

    profile = resolve_profile(config.env)
    algorithm = build_algorithm(config)
    # Validation built the envs already; a dry run lists them with the other components.
    envs = check_envs_build(config, profile) if dry_run else {}
    model, tokenizer = load_local_model(config.backend.model, device=config.backend.device)
    client = LocalPolicyClient(
        model, tokenizer, seed=config.seed, max_batch_size=config.backend.max_concurrency, initial_version=0
    )
    backend = LocalBackend(config.backend, client=client)
    weights = DirectoryWeights(config.pipeline.weights_dir)
    source = rollout_source(
        config,
        profile=profile,
        backend=backend,
        credit_assigner=algorithm.credit_assigner,
        rollout_log=None if dry_run else str(run_dir / "rollouts.jsonl"),
    )

    async def load_new_weights(_step: int) -> None:
        await weights.apply_latest(model, client)

    actor = RedisPipelineActor(
        source,
        redis_url=config.pipeline.redis_url,
        queue_key=config.pipeline.queue_key,
        client=client,
        max_queue_len=config.pipeline.max_queue_len,
        backpressure_timeout_s=config.pipeline.wait_timeout_s,
        before_batch=load_new_weights,
    )
    if dry_run:
        await backend.aclose()
        return {
            "model": f"{type(model).__name__} ({config.backend.model}), sampling in-process",
            "tokenizer": f"{type(tokenizer).__name__}: {len(tokenizer):,} tokens",
            "engine": f"env {config.env!r}, {config.episodes} prompts x {config.samples_per_prompt} per batch",
            "algorithm": f"{algorithm.name} credit ({type(algorithm.credit_assigner).__name__})",
            "actor": f"{type(actor).__name__} -> {config.pipeline.queue_key} at {config.pipeline.redis_url}",
            **envs,
        }
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        stats = await actor.run(stop_event=stop, max_batches=config.pipeline.actor_batches or None)
    finally:
        await backend.aclose()
    return {"actor_id": actor.actor_id, **attrs.asdict(stats), "weights_applied": weights.applied}


async def _learner(
    config: PipelineRunConfig, run_dir: Path, *, dry_run: bool, resume: bool
) -> dict[str, Any]:
    from ludic_core.pipeline import RedisBatchSource
    from ludic_train.recipes.components import (
        build_model,
        check_ranks_agree,
        on_main_rank,
        run_keeping,
        trainer_config,
    )
    from ludic_train.recipes.weight_files import DirectoryWeights
    from ludic_train.trainer import Trainer

    ranks = launched_ranks()
    algorithm = build_algorithm(config)
    model, tokenizer = build_model(
        config.backend.model,
        device=config.backend.device,
        lora=config.lora,
        chat_template=config.chat_template,
    )
    if config.pipeline.clear_queue and not dry_run:
        # Before any rank claims: on_main_rank returns on every rank once rank 0 is done.
        on_main_rank(
            lambda: _clear_queue(config.pipeline.redis_url, config.pipeline.queue_key), "clearing the queue"
        )
    source = RedisBatchSource(
        config.pipeline.redis_url,
        queue_key=config.pipeline.queue_key,
        consumer=f"learner-{ranks.rank}",
        min_items=config.episodes * config.samples_per_prompt,
        wait_timeout_s=config.pipeline.wait_timeout_s,
        # Data sampled by weights newer than the learner's (left by a run it cannot continue) is
        # dead-lettered with the reason instead of stopping the run.
        current_version=lambda: trainer.step,
    )
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=attrs.evolve(
            trainer_config(config.trainer, tokenizer, device=config.backend.device),
            eval_every_steps=0,
            eval_at_start=False,
        ),
        publisher=DirectoryWeights(config.pipeline.weights_dir),
        **run_keeping(
            config.run,
            run_dir,
            lora=config.lora,
            resume=resume,
            dry_run=dry_run,
            total_steps=config.steps,
            title="pipeline",
        ),
    )
    try:
        if dry_run:
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            return {
                "model": f"{type(model).__name__} ({config.backend.model}): {trainable:,} trainable parameters",
                "tokenizer": f"{type(tokenizer).__name__}: {len(tokenizer):,} tokens",
                "source": f"RedisBatchSource <- {config.pipeline.queue_key} at {config.pipeline.redis_url}",
                "algorithm": f"{algorithm.name} (loss {type(algorithm.loss).__name__})",
                "trainer": f"{type(trainer).__name__} on {trainer.device}, max_lag {config.trainer.max_lag}",
            }
        check_ranks_agree(trainer.step, "the step to resume from")
        # Actors start from the learner's weights (a resumed learner's too).
        await trainer.publish()
        results = await trainer.train(max(0, config.steps - trainer.step))
    finally:
        await trainer.aclose()
        await source.aclose()
    return {
        "steps": trainer.step,
        "stale_items_dropped": sum(r.get("train/stale_items_dropped", 0.0) for r in results),
        "last": dict(results[-1]) if results else {},
    }


def _clear_queue(redis_url: str, queue_key: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url, socket_connect_timeout=10, socket_timeout=10)
    try:
        # The queue, its dead letters and every learner's claims (<queue_key>:processing:<consumer>, ...).
        claims = list(client.scan_iter(f"{queue_key}:*"))
        client.delete(queue_key, *claims)
    finally:
        client.close()


def run_actor(config: PipelineRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    """An actor has no state to resume: ``--resume`` starts it again with the run's config."""

    if launched_ranks().distributed:
        raise ConfigError(
            "pipeline-actor does not run under torchrun (its ranks would share one run directory): "
            "start one `ludic train pipeline-actor` process per sampler, each with its own run_dir"
        )
    return asyncio.run(_actor(config, run_dir, dry_run=dry_run))


def run_learner(config: PipelineRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    return asyncio.run(_learner(config, run_dir, dry_run=dry_run, resume=resume))
