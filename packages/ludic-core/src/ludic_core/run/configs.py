"""The typed run configs of ``ludic eval`` and ``ludic rollouts``: attrs classes, read from TOML and
``key=value`` overrides by :mod:`ludic_core.run.loading`, and written back whole into the run directory.

Nested tables group what belongs together (``[backend]``, ``[sampling]``, and ``[rollout]``: the library's
:class:`~ludic_core.rollout_settings.RolloutSettings`, so max_steps, concurrency, timeouts and the failure
policy mean what they mean everywhere else); an override names a nested field with dots:
``backend.model=my-model``, ``sampling.temperature=0.7``, ``rollout.max_steps=9``,
``env_kwargs.opponent=minimax``.
"""

from __future__ import annotations

from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.inference import SamplingParams
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S, RolloutSettings
from ludic_core.validation import check_number, number_in

__all__ = [
    "BackendConfig",
    "EpisodesConfig",
    "EvalConfig",
    "RolloutsConfig",
    "RunConfig",
    "SamplingConfig",
    "at_least",
    "server_urls",
]

MAX_EPISODES_PER_BATCH = 1_000_000
"""The most episodes one batch (one eval, one training step) may ask for: a million requests take
about a gigabyte before a single one runs."""


def at_least(minimum: float) -> Any:
    """An attrs validator: a finite number ``>= minimum`` (``None`` passes), else a ConfigError naming
    the field (NaN and infinity included: ``sampling.temperature=nan`` is refused here, before any
    model loads)."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(f"{type(instance).__name__}.{attribute.name}", value, minimum=minimum, optional=True)

    return check


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_number(
        f"{type(instance).__name__}.{attribute.name}", value, minimum=0, exclusive=True, optional=True
    )


def _ks(instance: Any, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    bad = [k for k in value if k < 1 or k > instance.samples_per_prompt]
    if not value or bad:
        raise ConfigError(
            f"{type(instance).__name__}.{attribute.name} must list ks in [1, samples_per_prompt="
            f"{instance.samples_per_prompt}], got {list(value)!r}"
        )


def server_urls(instance: Any, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    """An attrs validator: one or more distinct http(s) URLs, else a ConfigError naming the field."""
    where = f"{type(instance).__name__}.{attribute.name}"
    if not value:
        raise ConfigError(f"{where} must list at least one server URL, got []")
    for url in value:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: {url!r} is not an http(s) URL such as http://localhost:8000/v1")
    repeated = sorted({url for url in value if value.count(url) > 1})
    if repeated:
        raise ConfigError(f"{where} lists {repeated[0]!r} more than once")


@attrs.frozen(kw_only=True)
class BackendConfig:
    """Where completions come from. ``kind``: a registered backend (``ludic eval``/``rollouts``: group
    ``ludic.backends``; ``ludic train``: ``ludic.samplers``), checked when the command starts: built in
    ``openai`` (OpenAI-compatible servers at ``base_urls``, each request to the least busy, ``model`` the
    served name, the key read from ``api_key_env``), ``local`` (ludic-train: an in-process model
    directory, ``smollm2`` or ``tiny``), ``vllm`` (ludic-vllm: token-level from vLLM servers, prompts
    rendered with ``tokenizer``, else ``model``), ``tinker`` (ludic-tinker)."""

    kind: str = "openai"
    model: str = ""
    base_urls: tuple[str, ...] = attrs.field(default=("http://localhost:8000/v1",), validator=server_urls)
    """One URL or a list (``base_urls = ["http://node-1:8000/v1", "http://node-2:8000/v1"]``)."""
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = attrs.field(default=32, validator=at_least(1))
    request_timeout_s: float = attrs.field(default=DEFAULT_MODEL_CALL_TIMEOUT_S, validator=_positive)
    max_retries: int = attrs.field(default=4, validator=at_least(0))
    device: str = "cpu"
    tokenizer: str = ""


@attrs.frozen(kw_only=True)
class RunConfig:
    """What the config of every ``ludic`` command that runs something holds: the ``seed`` its
    randomness derives from and ``run_dir``, where its outputs go (empty: a fresh directory under
    ``runs/`` named after the command and the time)."""

    seed: int = attrs.field(default=0, validator=at_least(0))
    run_dir: str = ""


_SAMPLING = attrs.fields(SamplingParams)


@attrs.frozen(kw_only=True)
class SamplingConfig:
    """Sampling parameters (see :class:`~ludic_core.inference.SamplingParams`); ``max_tokens`` and
    ``stop`` left unset take the env profile's values."""

    temperature: float = attrs.field(default=_SAMPLING.temperature.default, validator=at_least(0))
    max_tokens: int | None = attrs.field(default=None, validator=at_least(1))
    top_p: float = attrs.field(default=_SAMPLING.top_p.default, validator=[_positive, number_in(0.0, 1.0)])
    stop: tuple[str, ...] | None = None


@attrs.frozen(kw_only=True)
class EpisodesConfig(RunConfig):
    """What ``ludic eval`` and ``ludic rollouts`` both run: ``episodes`` prompts (env seeds), each
    sampled ``samples_per_prompt`` times, against ``backend``. Each setting is declared here once; the
    commands' configs add only their own. ``run_dir`` empty: ``runs/<command>-<env>-<time>``.

    ``vary_starts``: each prompt starts where the env's eval profile puts it (Tic-Tac-Toe: its own
    opening position, the agent on X and O in turn; QA: its own dataset row), so ``n`` prompts are
    ``n`` different episodes even under greedy sampling; ``false``: every prompt builds the env from
    ``env_kwargs`` alone and differs by its env seed only. What ``env_kwargs`` fixes (``agent_mark``,
    ``start_board``, ``index``) is never varied.

    ``protocol`` and ``agent`` say who plays (:mod:`ludic_core.run.players`): a registered protocol
    (``single_agent``; ``multi_agent``: the policy in every seat of the env) with a registered agent
    (``chat``: the backend's own; ``agent_kwargs`` its JSON options) in each seat."""

    env: str
    env_kwargs: dict[str, Any] = attrs.field(factory=dict)
    protocol: str = "single_agent"
    agent: str = "chat"
    agent_kwargs: dict[str, Any] = attrs.field(factory=dict)
    backend: BackendConfig = attrs.field(factory=BackendConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    episodes: int = attrs.field(default=100, validator=at_least(1))
    samples_per_prompt: int = attrs.field(default=1, validator=at_least(1))
    rollout: RolloutSettings = attrs.field(
        factory=lambda: RolloutSettings(max_steps=20, concurrency=32, episode_timeout_s=1800.0)
    )
    vary_starts: bool = True
    system_prompt: str | None = None

    def __attrs_post_init__(self) -> None:
        total = self.episodes * self.samples_per_prompt
        if total > MAX_EPISODES_PER_BATCH:
            raise ConfigError(
                f"{type(self).__name__}: episodes x samples_per_prompt = {self.episodes} x "
                f"{self.samples_per_prompt} = {total} episodes in one batch, over {MAX_EPISODES_PER_BATCH}: "
                "their requests alone would not fit in memory; split the run"
            )


@attrs.frozen(kw_only=True)
class EvalConfig(EpisodesConfig):
    """``ludic eval``: the episodes plus ``pass_k`` (pass@k needs k <= samples_per_prompt); greedy
    sampling by default."""

    pass_k: tuple[int, ...] = attrs.field(default=(1,), validator=_ks)


@attrs.frozen(kw_only=True)
class RolloutsConfig(EpisodesConfig):
    """``ludic rollouts``: the episodes plus ``output`` (empty: ``<run_dir>/rollouts.jsonl``) and ``keep``
    (which rollouts go to ``output``, see :mod:`ludic_core.run.keep`). Rerun with the same ``output`` (or the same ``run_dir``) to resume: requests already done
    are skipped."""

    output: str = ""
    keep: str = "all"
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
