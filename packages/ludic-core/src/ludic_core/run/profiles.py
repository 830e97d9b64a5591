"""Eval profiles: what ``ludic eval`` and ``ludic rollouts`` need to know about an env beyond the env
itself: the parser of model replies, the outcome label of a finished episode, which episodes count as a
success (accuracy, pass@k), and sampling defaults.

Packages contribute profiles by env name through the entry-point group ``"ludic.eval_profiles"`` (a callable
taking no arguments and returning an :class:`EvalProfile`); an env without one gets :func:`default_profile`
(any non-empty reply is the action; outcomes failed / parse_error / truncated / finished).

Every label comes from the standard rollout record (:func:`~ludic_core.evaluation.rollout_record`), so a
parse failure or a failed episode is always counted, never dropped from a denominator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ludic_core.errors import ConfigError
from ludic_core.evaluation import MeanAtK, MetricReducer, PassAtK, Record, Reducer
from ludic_core.parsing import Parser, ParseResult
from ludic_core.registry import Registry

__all__ = [
    "EVAL_PROFILES",
    "EvalProfile",
    "Starts",
    "default_profile",
    "eval_reducers",
    "reply_parser",
    "resolve_profile",
]

Starts = Callable[[Mapping[str, Any], Callable[[], Any], int, int], Sequence[Mapping[str, Any]]]
"""``(env_kwargs, build_env, seed, count) -> count env-kwarg additions``, one per prompt: where each
evaluated prompt starts (a position, a side, a dataset row). ``build_env()`` builds the env from
``env_kwargs`` (to learn, say, how many rows it has); ``seed`` fixes the choice, so the same run config
plays the same episodes. A start must leave alone what ``env_kwargs`` fixes (return ``{}`` then)."""


def reply_parser(text: str) -> ParseResult:
    """The whole stripped reply is the action; an empty reply is a parse failure."""
    action = text.strip()
    if action:
        return ParseResult(action=action)
    return ParseResult(action=None, reward=-1.0, obs="Your reply was empty.")


def _generic_outcome(record: Record) -> str:
    if record.get("failed"):
        return "failed"
    if record.get("parse_error") and not record.get("reached_env"):
        return "parse_error"
    if record.get("truncated"):
        return "truncated"
    return "finished"


def _check_outcomes(_instance: Any, _attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value or len(set(value)) != len(value):
        raise ConfigError(f"EvalProfile.outcomes must be distinct labels, got {value!r}")


@attrs.frozen(kw_only=True)
class EvalProfile:
    """How to evaluate one env.

    * ``parser``: model reply -> env action (or a parse failure);
    * ``outcome``: rollout record -> one of ``outcomes`` (the eval table lists their rates in order);
    * ``success``: rollout record -> solved or not, for accuracy and pass@k (None: the env has no
      notion of success; only outcome rates and reward are reported);
    * ``max_tokens``, ``stop``: sampling defaults the run config may override;
    * ``stop_on_parse_error``: end the episode at the first unparsable reply;
    * ``starts``: spreads evaluated prompts over distinct starts (:data:`Starts`), so ``n`` prompts are
      ``n`` different games or questions even under greedy sampling, where the env seed alone may
      change nothing the model sees (a fixed opening position, rows drawn with repeats); None: each
      prompt differs by its env seed only.
    """

    parser: Parser = reply_parser
    outcomes: tuple[str, ...] = attrs.field(
        default=("finished", "truncated", "parse_error", "failed"), validator=_check_outcomes
    )
    outcome: Callable[[Record], str] = _generic_outcome
    success: Callable[[Record], bool] | None = None
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    stop_on_parse_error: bool = True
    starts: Starts | None = None
    description: str = ""

    def label(self, record: Record) -> str:
        label = self.outcome(record)
        if label not in self.outcomes:
            raise ConfigError(
                f"eval profile outcome {label!r} for rollout {record.get('rollout_id')!r} is not one of "
                f"its outcomes {list(self.outcomes)}"
            )
        return label


def default_profile() -> EvalProfile:
    return EvalProfile(description="any non-empty reply is the action")


EVAL_PROFILES: Registry[Any] = Registry("eval profile", "ludic.eval_profiles")
"""Env name -> a callable returning its :class:`EvalProfile`."""


def resolve_profile(env: str) -> EvalProfile:
    """The registered profile of ``env``, else :func:`default_profile`."""
    if env not in EVAL_PROFILES:
        return default_profile()
    profile = EVAL_PROFILES.build(env)
    if not isinstance(profile, EvalProfile):
        raise ConfigError(f"eval profile of env {env!r} is {type(profile).__name__}, not an EvalProfile")
    return profile


def eval_reducers(
    profile: EvalProfile, *, samples_per_prompt: int = 1, pass_k: tuple[int, ...] = (1,)
) -> list[MetricReducer]:
    """The eval table of ``profile``: each outcome's rate, accuracy (and pass@k over groups of
    ``samples_per_prompt``) when it defines success, the mean reward."""
    reducers: list[MetricReducer] = [
        Reducer(f"{label}_rate", _is(profile, label), "rate", "rollouts") for label in profile.outcomes
    ]
    if profile.success is not None:
        success = profile.success
        reducers.append(Reducer("accuracy", lambda record: bool(success(record)), "rate", "rollouts"))
        if samples_per_prompt > 1:
            reducers.extend(PassAtK(success, k) for k in pass_k)
            reducers.append(MeanAtK(success, samples_per_prompt, name="mean_accuracy_per_prompt"))
    reducers.append(Reducer("reward_mean", "total_reward", "mean", "rollouts"))
    return reducers


def _is(profile: EvalProfile, label: str) -> Any:
    return lambda record: profile.label(record) == label
