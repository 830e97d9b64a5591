"""The runner of the Tinker RL recipe (:mod:`ludic_tinker.recipes`): the episodes are built as for every
RL recipe (:mod:`ludic_core.run.rl`), sampled through :class:`~ludic_tinker.TinkerChatClient`
and trained by :class:`~ludic_tinker.TinkerTrainer`, which hands new weights to the sampler every step."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.run.rl import build_algorithm, check_envs_build, check_rl_episodes
from ludic_tinker.cli_backend import TinkerBackend, fake_model_tokenizer
from ludic_tinker.recipes import TinkerRLRunConfig, adam_config

__all__ = ["check_tinker_rl", "run_tinker_rl"]


def check_tinker_rl(config: TinkerRLRunConfig) -> None:
    from ludic_tinker.losses import tinker_loss_for

    world_size = os.environ.get("WORLD_SIZE", "1")
    if world_size != "1":
        # Tinker trains remotely: every torchrun rank would run (and pay for) the same remote run.
        raise ConfigError(
            f"WORLD_SIZE = {world_size!r}: the Tinker recipes train on Tinker's service, so they run as "
            "one process; run them without torchrun"
        )
    # One owner per setting: what Tinker trains, and where, is the [tinker] table's.
    for field, owner in (("model", "base_model"), ("base_urls", "base_url")):
        value = getattr(config.backend, field)
        if value != getattr(attrs.fields(type(config.backend)), field).default:
            raise ConfigError(
                f"backend.{field} = {value!r}: this recipe takes it from tinker.{owner}; set that instead"
            )
    if config.lora.rank < 1:
        raise ConfigError(f"lora.rank = {config.lora.rank}: Tinker trains LoRA adapters only (rank >= 1)")
    settings = config.tinker
    if settings.fake_service:
        # The fake cannot honour these; ignoring one would run something other than what was asked.
        for field, value, reason in (
            ("base_url", settings.base_url, "the fake serves on a loopback port of its own"),
            ("tokenizer", settings.tokenizer, "the fake model's vocabulary is bytes (FakeTokenizer)"),
        ):
            if value is not None:
                raise ConfigError(
                    f"tinker.fake_service = true cannot be combined with tinker.{field} = {value!r}: {reason}"
                )
    check_rl_episodes(config)
    # The algorithm must map onto one of Tinker's built-in losses.
    tinker_loss_for(build_algorithm(config)).check_supported()


@attrs.frozen
class _Wiring:
    base_url: str | None
    api_key: str | None
    tokenizer: Any
    chat_template: Any


@contextlib.contextmanager
def _service(config: TinkerRLRunConfig) -> Iterator[_Wiring]:
    settings = config.tinker
    if not settings.fake_service:
        tokenizer: Any = None
        chat_template: Any = None
        if settings.tokenizer is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(settings.tokenizer)
        else:  # the fake's model on a fake service of the caller's (tests): its byte tokenizer
            tokenizer, chat_template = fake_model_tokenizer(settings.base_model) or (None, None)
        yield _Wiring(settings.base_url, None, tokenizer, chat_template)
        return
    from ludic_tinker.testing import ByteChatTemplate, FakeTokenizer, fake_tinker_service

    with fake_tinker_service(seed=config.seed, base_models=(settings.base_model,), set_env=False) as service:
        fake = FakeTokenizer()
        yield _Wiring(service.base_url, service.api_key, fake, ByteChatTemplate(fake))


async def _run(
    config: TinkerRLRunConfig, run_dir: Path, wiring: _Wiring, *, dry_run: bool, resume: bool
) -> dict[str, Any]:
    from ludic_core.evaluation import run_eval
    from ludic_core.loggers.console import STEP_SUMMARY, PrintLogger
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.loggers.tee import TeeLogger
    from ludic_core.run.profiles import eval_reducers, resolve_profile
    from ludic_core.run.rl import eval_requests, rollout_source
    from ludic_tinker import (
        TinkerChatClient,
        TinkerTrainer,
        TinkerTrainerConfig,
        connect,
        create_training_client,
        tinker_loss_for,
    )

    settings = config.tinker
    profile = resolve_profile(config.env)
    algorithm = build_algorithm(config)
    # Validation built the envs already; a dry run lists them with the other components.
    envs = check_envs_build(config, profile) if dry_run else {}
    trainer_config = TinkerTrainerConfig(
        adam=adam_config(config.trainer),
        sampler_every=1,
        checkpoint_every=config.run.checkpoint_every,
        checkpoint_dir=str(run_dir / "checkpoints"),
        checkpoint_prefix=f"ludic-{config.env}",
        timeouts=settings.timeouts,
    )
    service = connect(base_url=wiring.base_url, api_key=wiring.api_key, timeouts=settings.timeouts)
    checkpoints = run_dir / "checkpoints"
    resuming = resume and checkpoints.is_dir() and any(checkpoints.iterdir())
    training_client = None
    if not resuming:
        training_client = await create_training_client(
            service,
            settings.base_model,
            rank=config.lora.rank,
            seed=config.seed,
            timeouts=settings.timeouts,
        )
    tokenizer = wiring.tokenizer
    if tokenizer is None:
        if training_client is None:
            raise ConfigError(
                "tinker.tokenizer: set it to resume (the base model's tokenizer directory or hub name)"
            )
        tokenizer = await asyncio.to_thread(training_client.get_tokenizer)
    # The first sampler comes from the trainer (its weights at its step) when training starts.
    client = TinkerChatClient(None, tokenizer, timeout_s=settings.timeouts.sample_s)
    backend = TinkerBackend(config.backend, client=client, chat_template=wiring.chat_template)
    source = rollout_source(
        config,
        profile=profile,
        backend=backend,
        credit_assigner=algorithm.credit_assigner,
        rollout_log=None if dry_run else str(run_dir / "rollouts.jsonl"),
    )
    engine = source.engine
    logger = (
        None
        if dry_run
        else TeeLogger(
            JsonlLogger(run_dir / "metrics.jsonl"), PrintLogger(prefix="[tinker]", labels=STEP_SUMMARY)
        )
    )
    common = {"config": trainer_config, "chat_client": client, "logger": logger}
    if resuming:
        spec = algorithm
        trainer = await TinkerTrainer.resume(
            service,
            checkpoints,
            source,
            tinker_loss_for(spec),
            preprocess=spec.preprocess,
            credit_assigner=spec.credit_assigner,
            algorithm_name=spec.name,
            **common,
        )
    else:
        trainer = TinkerTrainer.from_algorithm(training_client, source, algorithm, **common)
    if dry_run:
        await trainer.aclose()
        return {
            "model": f"{settings.base_model} on Tinker ({'fake service' if settings.fake_service else 'service'}), LoRA rank {config.lora.rank}",
            "tokenizer": f"{type(tokenizer).__name__}",
            "engine": f"env {config.env!r}, {config.episodes} prompts x {config.samples_per_prompt} samples per step",
            "algorithm": f"{algorithm.name} as Tinker loss {tinker_loss_for(algorithm).loss_fn!r}",
            "trainer": f"TinkerTrainer, Adam lr {config.trainer.lr}, {config.steps} steps",
            **envs,
        }
    evals = eval_requests(config, profile)
    reducers = eval_reducers(profile)

    async def evaluate() -> None:
        if trainer.sampler_version != trainer.step:
            await trainer.refresh_sampler()
        result = await run_eval(engine, evals, reducers, config.rollout)
        assert logger is not None
        logger.log(trainer.step, {f"eval/{k}": float(v) for k, v in result.metrics.items() if v is not None})

    results: list[dict[str, Any]] = []
    try:
        while trainer.step < config.steps:
            chunk = config.steps - trainer.step
            every = config.trainer.eval_every_steps
            if every:
                chunk = min(chunk, every - trainer.step % every)
            results.extend(dict(r) for r in await trainer.train(chunk))
            if every and trainer.step % every == 0:
                await evaluate()
    finally:
        await trainer.aclose()
    return {"steps": trainer.step, "last": results[-1] if results else {}}


def run_tinker_rl(config: TinkerRLRunConfig, run_dir: Path, *, dry_run: bool, resume: bool) -> dict[str, Any]:
    if resume and config.tinker.fake_service:
        raise ConfigError(
            "--resume with tinker.fake_service = true: the fake keeps its checkpoints in memory for one "
            "process, so there is nothing to resume (resume runs on the real service)"
        )
    with _service(config) as wiring:
        return asyncio.run(_run(config, run_dir, wiring, dry_run=dry_run, resume=resume))
