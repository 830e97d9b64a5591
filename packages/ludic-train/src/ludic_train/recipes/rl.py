"""The on-policy RL runner (``tictactoe-grpo``, ``gsm8k-grpo``, ``gsm8k-gspo`` with a local Trainer): the
Trainer updates the model with a registered algorithm preset on episodes sampled through the
:class:`~ludic_core.run.samplers.Sampler` that ``backend.kind`` names: ``local`` in-process, a kind
that extends it (ludic-vllm's ``vllm``) elsewhere. Requests, algorithm and evaluation come from
:mod:`ludic_core.run.rl`. Sampled elsewhere, the run is data-parallel under ``torchrun`` (FSDP2; each
rank samples its share of every step and logs it to ``rollouts.rank<r>.jsonl``, rank 0 to
``rollouts.jsonl``; rank 0 alone publishes, evaluates and writes the run directory); sampled in-process
it is refused there (:func:`check_rl`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.errors import ConfigError
from ludic_core.run.profiles import eval_reducers, resolve_profile
from ludic_core.run.ranks import launched_ranks
from ludic_core.run.rl import (
    build_algorithm,
    check_envs_build,
    check_rl_episodes,
    eval_requests,
    rollout_source,
)
from ludic_core.run.samplers import Sampler, SamplerOpener, get_sampler, import_path
from ludic_train.recipes.config import RLRunConfig
from ludic_train.recipes.sampling import open_local_sampler
from ludic_train.recipes.warm_start import check_warm_start, describe_warm_start, warm_start

__all__ = ["check_rl", "run_rl"]


def check_rl(config: RLRunConfig) -> None:
    """Everything refusable without a model: the sampler, the model, the env, who plays it, the
    algorithm and its options, the warm start's teacher, the evaluation schedule, a step that does not
    split over the torchrun ranks."""
    from ludic_train.recipes.config import PipelineRunConfig

    in_process = config.backend.kind == "local" and not isinstance(config, PipelineRunConfig)
    if launched_ranks().distributed and in_process:
        # Sampling from a sharded model is a collective per forward pass, and each rank's episodes
        # take a different number of them, so the ranks would wait on each other forever.
        raise ConfigError(
            "backend.kind = 'local' samples the episodes from the model being trained, in this process, "
            "which a model sharded over torchrun ranks cannot do; for data-parallel RL sample elsewhere: "
            "backend.kind = 'vllm' (vLLM servers sample), or `ludic train pipeline-learner` under torchrun "
            "with `ludic train pipeline-actor` processes (docs/multi-node.md)"
        )
    if not config.backend.model:
        raise ConfigError("backend.model: missing (a model directory, 'smollm2' or 'tiny')")
    world_size = launched_ranks().world_size
    if config.episodes % world_size:
        raise ConfigError(
            f"episodes = {config.episodes} does not split over the {world_size} torchrun ranks: each "
            "rank samples episodes / ranks prompts (with all their samples_per_prompt samples) of every step"
        )
    check_rl_episodes(config)
    check_warm_start(config)
    every = config.trainer.eval_every_steps
    if every and every > config.steps and not config.trainer.eval_at_start:
        raise ConfigError(
            f"trainer.eval_every_steps = {every} is more than steps = {config.steps}: no eval would run"
        )


async def _run(
    config: RLRunConfig, run_dir: Path, *, dry_run: bool, resume: bool, open_sampler: SamplerOpener
) -> dict[str, Any]:
    from ludic_train.recipes.components import build_model

    algorithm = build_algorithm(config)
    # Validation built the envs already; a dry run lists them with the other components.
    envs = check_envs_build(config, resolve_profile(config.env)) if dry_run else {}
    model, tokenizer = build_model(
        config.backend.model,
        device=config.backend.device,
        lora=config.lora,
        chat_template=config.chat_template,
    )

    def export(directory: Path) -> None:
        from ludic_train.weights import export_pretrained

        export_pretrained(model, directory, tokenizer=tokenizer)

    sampler = await open_sampler(config, model, tokenizer, run_dir=run_dir, dry_run=dry_run, export=export)
    try:
        summary = await _train(
            config, run_dir, model, tokenizer, algorithm, sampler, dry_run=dry_run, resume=resume
        )
    finally:
        await sampler.aclose()
    return {**summary, **envs}


async def _train(
    config: RLRunConfig,
    run_dir: Path,
    model: Any,
    tokenizer: Any,
    algorithm: AlgorithmSpec,
    sampler: Sampler,
    *,
    dry_run: bool,
    resume: bool,
) -> dict[str, Any]:
    from ludic_core.evaluation import run_eval
    from ludic_train.recipes.components import (
        check_ranks_agree,
        run_keeping,
        trainer_config,
    )
    from ludic_train.trainer import Trainer

    ranks = launched_ranks()
    profile = resolve_profile(config.env)
    # Each rank logs the episodes it sampled (rank 0's file also holds the evaluations).
    rollout_log = "rollouts.jsonl" if ranks.main else f"rollouts.rank{ranks.rank}.jsonl"
    source = rollout_source(
        config,
        profile=profile,
        backend=sampler.backend,
        credit_assigner=algorithm.credit_assigner,
        rollout_log=None if dry_run else str(run_dir / rollout_log),
        rank=ranks.rank,
        world_size=ranks.world_size,
    )
    engine = source.engine
    evals = eval_requests(config, profile)
    reducers = eval_reducers(profile)

    async def evaluator(step: int) -> dict[str, Any]:
        result = await run_eval(engine, evals, reducers, config.rollout)
        return dict(result.metrics)

    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=trainer_config(config.trainer, tokenizer, device=config.backend.device),
        publisher=sampler.publisher,
        **run_keeping(
            config.run,
            run_dir,
            lora=config.lora,
            resume=resume,
            dry_run=dry_run,
            total_steps=config.steps,
            title=f"{config.env} {algorithm.name}",
        ),
        evaluator=evaluator,
    )
    warmed: dict[str, Any] = {}
    try:
        if dry_run:
            return {
                **_components(config, model, tokenizer, algorithm, trainer),
                "sampler": sampler.description,
                "warm start": describe_warm_start(config, tokenizer),
            }
        check_ranks_agree(trainer.step, "the step to resume from")
        # A resumed run's checkpoint holds the warmed-up weights already.
        if config.warm_start.teacher and trainer.step == 0:
            warmed = await warm_start(config, model, tokenizer, run_dir=run_dir)
            print(f"[warm start] {_warm_start_line(warmed)}", flush=True)
        # The sampler starts from the trainer's weights (a resumed run's too), stamped with its step.
        await trainer.publish()
        results = await trainer.train(max(0, config.steps - trainer.step))
    finally:
        await trainer.aclose()
    if config.run.save_final:
        from ludic_train.weights import export_pretrained

        export_pretrained(model, run_dir / "final", tokenizer=tokenizer)
    summary = {"steps": trainer.step, "last": dict(results[-1]) if results else {}}
    return {**summary, "warm_start": warmed} if warmed else summary


def _warm_start_line(warmed: dict[str, Any]) -> str:
    loss = (
        ""
        if warmed["loss_first"] is None
        else f", loss {warmed['loss_first']:.3f} -> {warmed['loss_last']:.3f}"
    )
    return (
        f"SFT on {warmed['items']} items ({warmed['rollouts']} rollouts of {warmed['episodes']} episodes by "
        f"teacher {warmed['teacher']!r}), {warmed['steps']} steps{loss}"
    )


def _components(
    config: RLRunConfig, model: Any, tokenizer: Any, algorithm: AlgorithmSpec, trainer: Any
) -> dict[str, Any]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {
        "model": f"{type(model).__name__} ({config.backend.model}): {total:,} parameters, {trainable:,} trainable",
        "tokenizer": f"{type(tokenizer).__name__}: {len(tokenizer):,} tokens",
        "engine": f"env {config.env!r} ({config.protocol}, agent {config.agent!r}), {config.episodes} prompts "
        f"x {config.samples_per_prompt} samples per step" + _rank_share(config),
        "algorithm": f"{algorithm.name} (credit {type(algorithm.credit_assigner).__name__}, loss {type(algorithm.loss).__name__})",
        "trainer": f"{type(trainer).__name__} on {trainer.device}, lr {config.trainer.lr}, {config.steps} steps",
    }


def _rank_share(config: RLRunConfig) -> str:
    ranks = launched_ranks()
    if not ranks.distributed:
        return ""
    return f" ({config.episodes // ranks.world_size} prompts on each of {ranks.world_size} ranks)"


def run_rl(
    config: RLRunConfig,
    run_dir: Path,
    *,
    dry_run: bool,
    resume: bool,
    open_sampler: SamplerOpener | None = None,
) -> dict[str, Any]:
    """The recipe's runner: build the model and open its sampler, then train (or, ``dry_run``,
    describe what was built). ``open_sampler``: where episodes come from (None: the sampler
    ``backend.kind`` names)."""
    if open_sampler is None:
        kind = get_sampler(config.backend.kind)[0]
        open_sampler = import_path(kind.open) if kind.open else open_local_sampler
    return asyncio.run(_run(config, run_dir, dry_run=dry_run, resume=resume, open_sampler=open_sampler))
