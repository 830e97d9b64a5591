"""What every on-policy RL recipe shares, whatever trains the model: the RL table of its run config
(:class:`RLEpisodesConfig`: the episodes table of ``ludic eval`` read as a training step, plus
``steps``, the ``algorithm`` preset and the greedy evaluation on ``eval_env_kwargs``) and the torch-free
pieces built from it. A backend adds its own tables (``[trainer]``, ``[tinker]``, ...).

Requests are a pure function of the step (seeds drawn from ``(seed, "train", step)``), so a resumed run
replays them, and evaluations use fixed seeds; each data-parallel rank samples its share of a step
(whole GRPO groups), so the ranks together sample exactly what one process would."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.credit import CreditAssigner
from ludic_core.errors import ConfigError
from ludic_core.inference import InferenceSpec, ReturnSpec
from ludic_core.registry import ALGORITHMS, ENVS, make_algorithm
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.run.backends import Backend
from ludic_core.run.configs import EpisodesConfig, SamplingConfig, at_least
from ludic_core.run.episodes import (
    CLI_PROTOCOL,
    build_engine,
    build_requests,
    check_env_builds,
    prompt_starts,
    sampling_params,
)
from ludic_core.run.profiles import EvalProfile, resolve_profile
from ludic_core.seeding import derive_seed
from ludic_core.strategies import GRPORequestStrategy

__all__ = [
    "DEFAULT_ALGORITHM",
    "RLEpisodesConfig",
    "build_algorithm",
    "check_envs_build",
    "check_rl_episodes",
    "eval_requests",
    "registered_algorithm",
    "rollout_source",
    "train_requests",
]


DEFAULT_ALGORITHM = "grpo"
"""The registered preset an RL config runs when it names none, online or on collected rollouts."""


@attrs.frozen(kw_only=True)
class RLEpisodesConfig(EpisodesConfig):
    """The RL table of a training recipe's run config (see the module docstring)."""

    steps: int = attrs.field(default=30, validator=at_least(1))
    """Training steps in all (a resumed run trains the rest)."""
    algorithm: str = DEFAULT_ALGORITHM
    algorithm_kwargs: dict[str, Any] = attrs.field(factory=dict)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    eval_episodes: int = attrs.field(default=32, validator=at_least(1))
    eval_env_kwargs: dict[str, Any] | None = None


def build_algorithm(config: RLEpisodesConfig) -> AlgorithmSpec:
    """The registered preset ``config.algorithm`` with the group size ``samples_per_prompt``."""
    if "group_size" in config.algorithm_kwargs:
        raise ConfigError(
            "algorithm_kwargs.group_size: the group size is samples_per_prompt; set that instead"
        )
    return registered_algorithm(
        config.algorithm, config.algorithm_kwargs, group_size=config.samples_per_prompt
    )


def registered_algorithm(name: str, kwargs: Mapping[str, Any], **preset_kwargs: Any) -> AlgorithmSpec:
    """The registered preset ``name`` built with the config's ``algorithm_kwargs`` (and the recipe's
    own ``preset_kwargs``); an unknown name or option is a :class:`ConfigError` naming it."""
    ALGORITHMS.check(name, field="algorithm")
    try:
        spec = make_algorithm(name, **preset_kwargs, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"algorithm {name!r} with algorithm_kwargs {dict(kwargs)!r}: {exc}") from exc
    if not isinstance(spec, AlgorithmSpec):
        raise ConfigError(f"algorithm {name!r} built {type(spec).__name__}, not an AlgorithmSpec")
    return spec


def check_rl_episodes(config: RLEpisodesConfig) -> None:
    """What is refusable without a model: the env, its profile, the algorithm and its options, and
    the training and evaluation envs built and reset (their data files and extras;
    :func:`check_envs_build`)."""
    ENVS.get(config.env)
    profile = resolve_profile(config.env)
    build_algorithm(config)
    check_envs_build(config, profile)


def _spec(
    config: RLEpisodesConfig, profile: EvalProfile, *, temperature: float | None, logprobs: bool
) -> InferenceSpec:
    sampling = (
        config.sampling if temperature is None else attrs.evolve(config.sampling, temperature=temperature)
    )
    return InferenceSpec(
        sampling=sampling_params(sampling, profile), return_=ReturnSpec(return_chosen_logprobs=logprobs)
    )


def train_requests(
    config: RLEpisodesConfig, profile: EvalProfile, *, rank: int = 0, world_size: int = 1
) -> Callable[[int], list[RolloutRequest]]:
    """``step -> requests``: ``episodes`` prompts, each sampled ``samples_per_prompt`` times, with the
    behaviour logprobs the on-policy losses need; with ``world_size`` ranks, rank ``rank``'s
    ``episodes / world_size`` consecutive prompts of them (every sample of each)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"train_requests: world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ConfigError(f"train_requests: rank must be an int in [0, {world_size}), got {rank!r}")
    if config.episodes % world_size:
        raise ConfigError(
            f"episodes = {config.episodes} does not split over the {world_size} data-parallel ranks: "
            "each rank samples episodes / ranks prompts of every step"
        )
    share = config.episodes // world_size * config.samples_per_prompt
    spec = _spec(config, profile, temperature=None, logprobs=True)
    base = RolloutRequest(
        env=EnvSpec(config.env, kwargs=config.env_kwargs), protocol=ProtocolSpec(CLI_PROTOCOL), inference=spec
    )

    def requests(step: int) -> list[RolloutRequest]:
        strategy = GRPORequestStrategy(
            group_size=config.samples_per_prompt, seed=derive_seed(config.seed, "train", step)
        )
        # Every rank draws the whole step (cheap) and keeps its slice: the strategy lays each prompt's
        # group out consecutively, so a slice of whole groups is the same on every run of that rank.
        return strategy.expand([base] * config.episodes)[rank * share : (rank + 1) * share]

    return requests


def check_envs_build(config: RLEpisodesConfig, profile: EvalProfile) -> dict[str, str]:
    """Build and reset the env of the first training episode and of the first evaluation episode
    (:func:`~ludic_core.run.episodes.check_env_builds`). :func:`check_rl_episodes` calls it before a
    run directory exists; a dry run prints what it returns."""
    return {
        "env": check_env_builds(train_requests(config, profile)(0)[0], config),
        "eval env": check_env_builds(eval_requests(config, profile)[0], config),
    }


def rollout_source(
    config: RLEpisodesConfig,
    *,
    profile: EvalProfile,
    backend: Backend,
    credit_assigner: CreditAssigner,
    rollout_log: str | None,
    rank: int = 0,
    world_size: int = 1,
) -> RolloutBatchSource:
    """The online batch source of an RL recipe: an engine over ``backend``'s agents, this config's
    :func:`train_requests` (rank ``rank``'s share of them) and rollout settings, credited by
    ``credit_assigner``."""
    return RolloutBatchSource(
        engine=build_engine(config, backend=backend, profile=profile, rollout_log=rollout_log),
        credit_assigner=credit_assigner,
        requests=train_requests(config, profile, rank=rank, world_size=world_size),
        settings=config.rollout,
    )


def eval_requests(config: RLEpisodesConfig, profile: EvalProfile) -> list[RolloutRequest]:
    """``eval_episodes`` greedy episodes on fixed seeds, on the env of ``eval_env_kwargs``, each
    prompt from its own start (the profile's, unless ``vary_starts`` is false)."""
    env_kwargs = config.env_kwargs if config.eval_env_kwargs is None else config.eval_env_kwargs
    seed = derive_seed(config.seed, "eval")
    starts = (
        prompt_starts(profile, env=config.env, env_kwargs=env_kwargs, seed=seed, count=config.eval_episodes)
        if config.vary_starts
        else None
    )
    return build_requests(
        env=config.env,
        env_kwargs=env_kwargs,
        episodes=config.eval_episodes,
        samples_per_prompt=1,
        seed=seed,
        inference=_spec(config, profile, temperature=0.0, logprobs=False),
        starts=starts,
    )
