"""The ``[warm_start]`` stage of the local RL recipes: SFT on a scripted teacher's episodes, then RL
from the weights it leaves (:class:`~ludic_train.recipes.config.WarmStartSettings`).

A small model often never produces the format a task needs (a tool call, a tagged move), so RL from
it gets no signal. A scripted teacher that knows the format (not the task) plays episodes through the
run's own env, protocol and agent, so its episodes are token for token what the model will see and
write; SFT on them teaches the format and leaves the task to RL. Teachers are registered by name in
the entry-point group ``"ludic.scripted_teachers"``: a callable taking the student's tokenizer and
returning a token-level :class:`~ludic_core.inference.ChatClient` (ludic-envs registers
``calculator``). The teacher's episodes go to ``warm_start.jsonl`` in the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.registry import Registry
from ludic_core.run.ranks import launched_ranks
from ludic_train.recipes.config import RLRunConfig

__all__ = ["SCRIPTED_TEACHERS", "check_warm_start", "describe_warm_start", "warm_start"]

SCRIPTED_TEACHERS: Registry[Any] = Registry("scripted teacher", "ludic.scripted_teachers")
"""Teacher name -> a callable ``(tokenizer) -> ChatClient`` replying with that tokenizer's ids."""


def check_warm_start(config: RLRunConfig) -> None:
    """Refuse an unregistered teacher, and a warm start under torchrun (it runs in one process)."""
    teacher = config.warm_start.teacher
    if not teacher:
        return
    SCRIPTED_TEACHERS.check(
        teacher, field="warm_start.teacher", hint='; warm_start.teacher = "" trains without a warm start'
    )
    if launched_ranks().distributed:
        raise ConfigError(
            f"warm_start.teacher = {teacher!r}: the warm start trains in one process, not under torchrun; "
            "warm up in a plain run (run.save_final = true) and train from its export (backend.model = "
            '<run_dir>/final, warm_start.teacher = "")'
        )


def describe_warm_start(config: RLRunConfig, tokenizer: Any) -> str:
    """One line for ``--dry-run``, once the teacher is built for ``tokenizer``."""
    settings = config.warm_start
    if not settings.teacher:
        return "none"
    teacher = SCRIPTED_TEACHERS.build(settings.teacher, tokenizer=tokenizer)
    return (
        f"{type(teacher).__name__} {settings.teacher!r}: SFT on {settings.episodes} of its episodes, "
        f"{settings.steps} steps of {settings.batch_size} at lr {settings.lr}, before RL"
    )


async def warm_start(config: RLRunConfig, model: Any, tokenizer: Any, *, run_dir: Path) -> dict[str, Any]:
    """Play the teacher's episodes and train ``model`` on them with the ``sft`` preset; returns what
    the stage did (episodes, their unfailed rollouts, SFT items, steps, the first and last loss)."""
    from ludic_core.algorithms.presets import sft
    from ludic_core.batch_sources import OfflineBatchSource
    from ludic_core.credit import ConstantCredit
    from ludic_core.inference import InferenceSpec
    from ludic_core.run.backends import ClientBackend, TokenizedClient
    from ludic_core.run.episodes import build_engine, build_requests, sampling_params
    from ludic_core.run.profiles import resolve_profile
    from ludic_core.saw_builder import build_saw_items
    from ludic_core.seeding import derive_seed
    from ludic_train.recipes.components import trainer_config
    from ludic_train.trainer import Trainer

    settings = config.warm_start
    profile = resolve_profile(config.env)
    teacher = SCRIPTED_TEACHERS.build(settings.teacher, tokenizer=tokenizer)
    # The agents render prompts with the student's tokenizer, which the teacher's client lacks.
    backend = ClientBackend(TokenizedClient(teacher, tokenizer))
    engine = build_engine(
        config, backend=backend, profile=profile, rollout_log=str(run_dir / "warm_start.jsonl")
    )
    requests = build_requests(
        env=config.env,
        env_kwargs=config.env_kwargs,
        episodes=settings.episodes,
        samples_per_prompt=1,
        seed=derive_seed(config.seed, "warm_start"),
        inference=InferenceSpec(sampling=sampling_params(config.sampling, profile)),
    )
    played = await engine.generate_rollouts(requests, config.rollout)
    rollouts = [r for r in played.rollouts if not r.failed]
    items = build_saw_items(rollouts, ConstantCredit().compute(rollouts))
    if not items:
        raise ConfigError(
            f"warm_start.teacher = {settings.teacher!r} left no trainable episode of {settings.episodes}; "
            f"its episodes are in {run_dir / 'warm_start.jsonl'}"
        )
    settings_for_sft = attrs.evolve(
        trainer_config(config.trainer, tokenizer, device=config.backend.device),
        lr=settings.lr,
        publish_every_steps=0,
        eval_every_steps=0,
        eval_at_start=False,
    )
    trainer = Trainer(
        model=model,
        algorithm=sft(),
        batch_source=OfflineBatchSource(items, batch_size=settings.batch_size, seed=config.seed),
        config=settings_for_sft,
    )
    try:
        results = await trainer.train(settings.steps)
    finally:
        await trainer.aclose()
    losses = [float(r["train/loss"]) for r in results if "train/loss" in r]
    return {
        "teacher": settings.teacher,
        "episodes": settings.episodes,
        "rollouts": len(rollouts),
        "items": len(items),
        "steps": trainer.step,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
    }
