"""The engine and requests of a run of episodes (``ludic eval``, ``ludic rollouts``, the RL recipes).

Requests are a pure function of the config: prompt ``i`` gets its env seed from ``(seed, "env", i)``,
its start from the env profile's ``starts`` (a Tic-Tac-Toe position and side, a dataset row: each prompt
its own, chosen with ``(seed, "starts")``; ``vary_starts=false`` leaves the env seed as the only
difference) and sample ``j`` of it its sampling seed from ``(seed, "sampling", i, j)``, and request meta
carries a stable ``request_id`` (``"i.j"``), so reruns and resumed runs replay the same episodes.
Samples of a prompt form a group (``group_id``, ``group_index``, ``group_size``) for pass@k and for
group-normalised credit when the rollouts train later (``ludic train offline-rl``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from ludic_core.engine import RolloutEngine
from ludic_core.errors import ConfigError, EpisodeError, LudicError
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.registry import ENVS
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.run.backends import Backend
from ludic_core.run.configs import EpisodesConfig, SamplingConfig
from ludic_core.run.players import check_players, protocol_factory
from ludic_core.run.profiles import EvalProfile, resolve_profile
from ludic_core.seeding import derive_seed

__all__ = [
    "CLI_PROTOCOL",
    "build_engine",
    "build_episodes",
    "build_requests",
    "check_env_builds",
    "cli_worker_engine",
    "config_starts",
    "episodes_logged_in",
    "first_request",
    "inference_spec",
    "prompt_starts",
    "sampling_params",
]

CLI_PROTOCOL = "ludic_cli_agent"
"""The protocol name the CLI's engine registers (a single agent from the backend)."""


def sampling_params(config: SamplingConfig, profile: EvalProfile) -> SamplingParams:
    return SamplingParams(
        temperature=config.temperature,
        max_tokens=config.max_tokens if config.max_tokens is not None else profile.max_tokens,
        top_p=config.top_p,
        stop=config.stop if config.stop is not None else profile.stop,
    )


def prompt_starts(
    profile: EvalProfile, *, env: str, env_kwargs: Mapping[str, Any], seed: int, count: int
) -> list[dict[str, Any]]:
    """The env-kwarg additions of prompts ``0 .. count-1``: the profile's ``starts`` (chosen with
    ``(seed, "starts")``), or nothing when the profile has none."""
    if profile.starts is None:
        return [{} for _ in range(count)]
    kwargs = dict(env_kwargs)
    starts = [
        dict(start)
        for start in profile.starts(
            kwargs, lambda: _build_env(env, kwargs), derive_seed(seed, "starts"), count
        )
    ]
    if len(starts) != count:
        raise ConfigError(f"the eval profile of env {env!r} gave {len(starts)} starts for {count} prompts")
    return starts


def build_requests(
    *,
    env: str,
    env_kwargs: dict[str, Any],
    episodes: int,
    samples_per_prompt: int,
    seed: int,
    inference: InferenceSpec,
    starts: Sequence[Mapping[str, Any]] | None = None,
) -> list[RolloutRequest]:
    """``episodes`` prompts, ``samples_per_prompt`` requests each; prompt ``i``'s env is built with
    ``env_kwargs`` plus ``starts[i]`` (:func:`prompt_starts`)."""
    if starts is not None and len(starts) < episodes:
        raise ConfigError(f"build_requests: {len(starts)} starts for {episodes} prompts")
    requests: list[RolloutRequest] = []
    for i in range(episodes):
        kwargs = env_kwargs if starts is None else {**env_kwargs, **starts[i]}
        for j in range(samples_per_prompt):
            requests.append(
                RolloutRequest(
                    env=EnvSpec(env, kwargs=kwargs),
                    protocol=ProtocolSpec(CLI_PROTOCOL),
                    env_seed=derive_seed(seed, "env", i),
                    sampling_seed=derive_seed(seed, "sampling", i, j),
                    inference=inference,
                    meta={
                        "request_id": f"{i}.{j}",
                        "group_id": f"prompt-{i}",
                        "group_index": j,
                        "group_size": samples_per_prompt,
                    },
                )
            )
    return requests


def inference_spec(sampling: SamplingParams, backend: Backend) -> InferenceSpec:
    # Token-level backends return the behaviour logprobs, so their rollouts can train on-policy later.
    return InferenceSpec(sampling=sampling, return_=ReturnSpec(return_chosen_logprobs=backend.token_level))


def build_engine(
    config: EpisodesConfig, *, backend: Backend, profile: EvalProfile, rollout_log: str | None
) -> RolloutEngine:
    """The engine of a command's episodes: ``config.env`` played by ``config.protocol`` with
    ``backend``'s ``config.agent`` in every seat (:mod:`ludic_core.run.players`), in
    ``config.rollout.workers`` processes."""
    # Resolve the env now: an unknown name fails before any model call, listing the registered envs.
    ENVS.get(config.env)
    worker_engine = cli_worker_engine(config, backend)
    protocol = protocol_factory(
        protocol=config.protocol,
        agent=config.agent,
        agent_kwargs=config.agent_kwargs,
        build_env=lambda: _build_env(config.env, config.env_kwargs),
        backend=backend,
        parser=profile.parser,
        system_prompt=config.system_prompt,
        stop_on_parse_error=profile.stop_on_parse_error,
    )
    return RolloutEngine(
        protocol_factories={CLI_PROTOCOL: protocol},
        base_seed=config.seed,
        rollout_log=rollout_log,
        worker_engine=worker_engine,
    )


def cli_worker_engine(config: EpisodesConfig, backend: Backend) -> Callable[[], Any] | None:
    """How each rollout worker process (``rollout.workers > 1``) builds the engine: the same config
    and profile, over a backend of its own built from ``backend.worker_factory()``. A backend without
    one (its client lives in this process: an in-process model, a sampler handed new weights) is
    refused."""
    workers = config.rollout.workers
    make_backend: Callable[[], Backend] | None = getattr(backend, "worker_factory", lambda: None)()
    if workers > 1 and make_backend is None:
        raise ConfigError(
            f"rollout.workers={workers} runs episodes in worker processes, each building its own backend, "
            f"and {type(backend).__name__} cannot be rebuilt there: its client lives in this process (an "
            "in-process model, a sampler handed new weights); use rollout.workers=1, or a server backend "
            "(openai, vllm)"
        )
    if make_backend is None:
        return None
    return functools.partial(_worker_engine, config, make_backend)


@asynccontextmanager
async def _worker_engine(
    config: EpisodesConfig, make_backend: Callable[[], Backend]
) -> AsyncIterator[RolloutEngine]:
    backend = make_backend()
    try:
        yield build_engine(config, backend=backend, profile=resolve_profile(config.env), rollout_log=None)
    finally:
        await backend.aclose()


def config_starts(config: EpisodesConfig, profile: EvalProfile, count: int) -> list[dict[str, Any]] | None:
    """The starts of a command's first ``count`` prompts, or None under ``vary_starts=false``."""
    if not config.vary_starts:
        return None
    return prompt_starts(profile, env=config.env, env_kwargs=config.env_kwargs, seed=config.seed, count=count)


def first_request(config: EpisodesConfig, profile: EvalProfile) -> RolloutRequest:
    """The first request of a command's episodes: its env, env kwargs (its start included) and env
    seed."""
    return build_requests(
        env=config.env,
        env_kwargs=config.env_kwargs,
        episodes=1,
        samples_per_prompt=1,
        seed=config.seed,
        inference=InferenceSpec(),
        starts=config_starts(config, profile, 1),
    )[0]


def build_episodes(
    config: EpisodesConfig, *, profile: EvalProfile, backend: Backend, run_dir: Path
) -> tuple[RolloutEngine, list[RolloutRequest]]:
    """The engine and the requests of a command's episodes, every episode logged to
    ``run_dir/episodes.jsonl``."""
    engine = build_engine(
        config, backend=backend, profile=profile, rollout_log=str(run_dir / "episodes.jsonl")
    )
    requests = build_requests(
        env=config.env,
        env_kwargs=config.env_kwargs,
        episodes=config.episodes,
        samples_per_prompt=config.samples_per_prompt,
        seed=config.seed,
        inference=inference_spec(sampling_params(config.sampling, profile), backend),
        starts=config_starts(config, profile, config.episodes),
    )
    return engine, requests


@contextmanager
def episodes_logged_in(run_dir: Path) -> Iterator[None]:
    """Add where every episode (and its failure's traceback) is logged to an :class:`EpisodeError`
    (too many failed episodes) raised inside."""
    try:
        yield
    except EpisodeError as exc:
        raise EpisodeError(
            f"{exc}; every episode, with its traceback, is in {run_dir / 'episodes.jsonl'}"
        ) from exc


def _refused(what: str, call: Callable[[], Any]) -> Any:
    """``call()``; an error that is not a Ludic one becomes a :class:`ConfigError` saying ``what``."""
    try:
        return call()
    except LudicError:
        raise
    except Exception as exc:
        raise ConfigError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _build_env(kind: str, kwargs: Mapping[str, Any]) -> Any:
    what = f"env {kind!r} with env_kwargs {dict(kwargs)} could not be built"
    return _refused(what, lambda: ENVS.get(kind)(**kwargs))


def check_env_builds(request: RolloutRequest, config: EpisodesConfig | None = None) -> str:
    """Build ``request``'s env and reset it with its seed, as its episode will, and describe it; with
    the command's ``config``, also refuse a ``protocol`` or ``agent`` that cannot play it
    (:func:`~ludic_core.run.players.check_players`).

    Commands call it before they create a run directory or load a model, so a missing data file, a
    missing extra or a bad env kwarg is refused once, with its cause (a :class:`ConfigError` naming the
    env and its kwargs), instead of failing every episode (or, in a dry run, not at all)."""
    kind, kwargs, seed = request.env.kind, dict(request.env.kwargs), request.env_seed
    env = _build_env(kind, kwargs)
    if config is not None:
        check_players(config.protocol, config.agent, list(env.agent_ids))
    what = f"env {kind!r} with env_kwargs {kwargs} could not be reset (seed {seed})"
    observed = _refused(what, lambda: env.reset(seed=seed))
    return f"env {kind!r} built and reset (seed {seed}): {len(observed)} agent(s) observe the start"
