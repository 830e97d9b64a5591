"""Rollouts → SAW items: one item per agent turn.

A *turn* is a run of steps sharing a ``turn_id``: every model call for one decision (tool loops
included) plus at most one env step, which closes it. The item's tokens are the first call's prompt
(action mask 0) and completion (mask 1), then for each later call the new suffix of its prompt (mask 0)
and its completion (mask 1). A later prompt that does not extend the sequence so far raises
:class:`~ludic_core.errors.UnbuildableRolloutError`, and message-level calls (no token ids) raise
:class:`~ludic_core.errors.DataError`, since training on tokens the model never sampled is silently
wrong; such rollouts become SFT data through ``retokenize_with=`` (:mod:`ludic_core.retokenize`).
Weight and reward come from the turn's final step. ``sampling_temperature`` is the one the calls'
traces record; calls of one turn at different temperatures raise :class:`~ludic_core.errors.DataError`.
Items are :class:`~ludic_core.packed_saw.PackedSAWItem` s, converted once into arrays in C.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ludic_core.credit import RolloutStepKey, group_key
from ludic_core.errors import DataError, UnbuildableRolloutError
from ludic_core.message_client import is_message_level
from ludic_core.packed_saw import UINT32, PackedSAWItem
from ludic_core.retokenize import MessageTemplate, check_template, retokenize_call
from ludic_core.saw import SAWItem
from ludic_core.types import AgentStep, EnvironmentStep, Rollout, Step

__all__ = [
    "Turn",
    "TurnTokens",
    "build_saw_items",
    "concat_turn_tokens",
    "rollout_to_saw_items",
    "split_turns",
]

_SCALAR = (str, int, float, bool, type(None))


@attrs.frozen
class Turn:
    """The steps of one agent decision: its model calls and the env step that closed it (if any)."""

    turn_id: str
    index: int
    agent_steps: tuple[AgentStep, ...]
    env_step: EnvironmentStep | None

    @property
    def final_step(self) -> Step:
        return self.env_step if self.env_step is not None else self.agent_steps[-1]


@attrs.frozen
class TurnTokens:
    """A turn's concatenated sequence; the action mask as run lengths of 0s, 1s, 0s, ... (one prompt
    span and one completion span per model call), since the spans are what concatenation knows."""

    input_ids: tuple[int, ...]
    action_runs: tuple[int, ...]
    actor_logps: tuple[float, ...] | None
    completion_length: int
    sampling_temperature: float | None = None

    @property
    def action_mask(self) -> tuple[int, ...]:
        mask: list[int] = []
        for position, run in enumerate(self.action_runs):
            mask += (position & 1,) * run
        return tuple(mask)


def _where(rollout: Rollout, turn_id: str) -> str:
    """A turn's place, for error messages."""
    return f"rollout {rollout.id!r}, turn {turn_id!r}"


def split_turns(rollout: Rollout) -> list[Turn]:
    """Group a rollout's steps into turns (consecutive steps with the same ``turn_id``)."""
    runs: list[list[Step]] = []
    for step in rollout.steps:
        if runs and runs[-1][-1].turn_id == step.turn_id:
            runs[-1].append(step)
        else:
            runs.append([step])
    turns: list[Turn] = []
    for index, run in enumerate(runs):
        env_steps = [s for s in run if isinstance(s, EnvironmentStep)]
        if len(env_steps) > 1:
            raise DataError(
                f"{_where(rollout, run[0].turn_id)} has {len(env_steps)} env steps (indices "
                f"{[s.index for s in env_steps]}); a turn has at most one"
            )
        if env_steps and run[-1] is not env_steps[0]:
            raise DataError(
                f"{_where(rollout, run[0].turn_id)}: env step {env_steps[0].index} is not the last step of its turn"
            )
        agent_steps = tuple(s for s in run if isinstance(s, AgentStep))
        if not agent_steps:
            raise DataError(
                f"{_where(rollout, run[0].turn_id)} has no model call (step indices {[s.index for s in run]}); "
                "nothing to train on"
            )
        turns.append(
            Turn(
                turn_id=run[0].turn_id,
                index=index,
                agent_steps=agent_steps,
                env_step=env_steps[0] if env_steps else None,
            )
        )
    return turns


def concat_turn_tokens(agent_steps: Sequence[AgentStep], *, where: str = "turn") -> TurnTokens:
    """Concatenate a turn's model calls (see the module docstring)."""
    if not agent_steps:
        raise DataError(f"{where}: no model calls to concatenate")
    with_logps = [s.trace.completion_logprobs is not None for s in agent_steps]
    if any(with_logps) and not all(with_logps):
        missing = [s.index for s, has in zip(agent_steps, with_logps, strict=True) if not has]
        raise DataError(
            f"{where}: steps {missing} have no completion logprobs but other calls of the turn do"
        )
    temperatures = {s.trace.sampling_temperature for s in agent_steps}
    if len(temperatures) > 1:
        per_step = {s.index: s.trace.sampling_temperature for s in agent_steps}
        raise DataError(
            f"{where}: its model calls sampled at different temperatures {per_step} (step index: "
            "temperature); one SAW item carries one sampling_temperature, so sample every call of a turn "
            "at the same temperature"
        )
    # Tuples concatenate in C and share their ints with the traces: the sequence is never copied
    # element by element, only packed once, into the item's array.
    sequence: tuple[int, ...] = ()
    runs: list[int] = []
    logps: tuple[float, ...] | None = () if all(with_logps) else None
    completion_length = 0
    for step in agent_steps:
        prompt = step.trace.prompt_token_ids
        n = len(sequence)
        if n and (len(prompt) < n or prompt[:n] != sequence):
            mismatch = next(
                (i for i, (a, b) in enumerate(zip(sequence, prompt, strict=False)) if a != b),
                min(n, len(prompt)),
            )
            raise DataError(
                f"{where}: the prompt token ids of step {step.index} do not extend the sequence so far "
                f"(sequence has {n} tokens, prompt has {len(prompt)}; first difference at position "
                f"{mismatch}). Turn concatenation needs append-only contexts within a turn"
            )
        completion = step.trace.completion_token_ids
        runs += (len(prompt) - n, len(completion))  # the new prompt suffix (0s), the completion (1s)
        sequence = prompt + completion
        completion_length += len(completion)
        if logps is not None:
            assert step.trace.completion_logprobs is not None
            logps += step.trace.completion_logprobs
    return TurnTokens(
        input_ids=sequence,
        action_runs=tuple(runs),
        actor_logps=logps,
        completion_length=completion_length,
        sampling_temperature=temperatures.pop(),
    )


POLICY_VERSION_KEYS = ("policy_version", "policy_version_start", "policy_version_end")
"""Agent-step info keys that carry the weights version a call was sampled with (a client reports the
version at the start and end of each request; a weight update in between makes them differ)."""


def _policy_version(agent_steps: Sequence[AgentStep]) -> int | None:
    # The oldest version any call of the turn was sampled with: what staleness control must compare.
    oldest: int | None = None
    for step in agent_steps:
        info = step.info
        for key in POLICY_VERSION_KEYS:
            version = info.get(key)
            # Most steps carry no version: one lookup each, the type checks only for those that do.
            if (
                version is not None
                and isinstance(version, int)
                and not isinstance(version, bool)
                and (oldest is None or version < oldest)
            ):
                oldest = version
    return oldest


@attrs.frozen
class _RolloutFacts:
    """What every item of a rollout repeats in its meta, computed once per rollout, not per turn
    (``total_reward`` alone walks every step)."""

    scalar_meta: dict[str, Any]
    group_id: str | None
    total_reward: float
    truncated: bool
    truncation_reason: str | None

    @classmethod
    def of(cls, rollout: Rollout) -> _RolloutFacts:
        try:
            group_id: str | None = group_key(rollout)[0]
        except DataError:
            group_id = None
        return cls(
            scalar_meta={
                k: v
                for k, v in rollout.meta.items()
                if isinstance(v, _SCALAR) and k not in ("engine", "request_meta")
            },
            group_id=group_id,
            total_reward=rollout.total_reward,
            truncated=rollout.truncated,
            truncation_reason=rollout.truncation_reason,
        )


def _turn_meta(rollout: Rollout, turn: Turn, tokens: TurnTokens, facts: _RolloutFacts) -> dict[str, Any]:
    final = turn.final_step
    last_call = turn.agent_steps[-1]
    # One dict display: the rollout's scalar meta first, so the turn's own keys win, as they always did.
    meta: dict[str, Any] = {
        **facts.scalar_meta,
        "group_id": facts.group_id,
        "rollout_id": rollout.id,
        "step_index": final.index,
        "step_kind": final.kind,
        "turn_id": turn.turn_id,
        "turn_index": turn.index,
        "reward": final.reward,
        "total_reward": facts.total_reward,
        "terminated": final.terminated,
        "truncated": final.truncated,
        "truncation_reason": final.truncation_reason,
        "episode_truncated": facts.truncated,
        "episode_truncation_reason": facts.truncation_reason,
        "parse_error": isinstance(final, AgentStep) and final.parse_error,
        "incomplete_completion": bool(last_call.info.get("incomplete_completion", False)),
        "finish_reason": last_call.trace.finish_reason,
        "completion_length": tokens.completion_length,
        "prompt_length": len(tokens.input_ids) - tokens.completion_length,
        "turn_has_env_step": turn.env_step is not None,
        "turn_agent_step_indices": [s.index for s in turn.agent_steps],
        "turn_action_targets": [s.action_target for s in turn.agent_steps],
    }
    version = _policy_version(turn.agent_steps)
    if version is None and isinstance(rollout.meta.get("policy_version"), int):
        version = rollout.meta["policy_version"]
    if version is not None:
        meta["policy_version"] = version
    # Scalar step info only (e.g. an env's "correct"): lists and dicts would bloat every item.
    meta["step_info"] = {k: v for k, v in final.info.items() if isinstance(v, _SCALAR)}
    return meta


def _retokenized_turn(agent_steps: Sequence[AgentStep], template: MessageTemplate, where: str) -> TurnTokens:
    if len(agent_steps) != 1 or not is_message_level(agent_steps[0].info):
        raise DataError(
            f"{where}: a re-tokenised turn must be one message-level call; it has steps "
            f"{[(s.index, 'message' if is_message_level(s.info) else 'token') for s in agent_steps]}"
        )
    prompt, completion = retokenize_call(agent_steps[0], template, where=where)
    return TurnTokens(
        input_ids=(*prompt, *completion),
        action_runs=(len(prompt), len(completion)),
        actor_logps=None,
        completion_length=len(completion),
    )


def _refuse_message_level(agent_steps: Sequence[AgentStep], where: str) -> None:
    message_level = [s.index for s in agent_steps if is_message_level(s.info)]
    if message_level:
        raise DataError(
            f"{where}: model calls {message_level} are message-level (sampled through a MessageClient such "
            "as OpenAIChatClient: info token_level=False) and carry no token ids; on-policy losses need the "
            "sampled tokens and their logprobs, so sample training rollouts with a token-level ChatClient "
            "(LocalPolicyClient, VLLMClient, TinkerChatClient), and re-tokenise message-level rollouts with "
            "the student's chat template before using them as SFT data"
        )


def _item(tokens: TurnTokens, weight: float, meta: dict[str, Any]) -> SAWItem:
    """The turn's item, its arrays packed once here (:class:`~ludic_core.packed_saw.PackedSAWItem`):
    ``array`` converts the ids and logprobs in C, refusing an id outside ``[0, 2**32)``, and the mask
    is its runs, so no pass over Python objects checks them again (the traces checked their types)."""
    try:
        input_ids = array(UINT32, tokens.input_ids)
        logps = None if tokens.actor_logps is None else array("d", tokens.actor_logps)
    except (OverflowError, TypeError):
        # An id no array holds (a negative one): a SAWItem of tuples takes it, as it always has, and
        # the wire refuses it by name if it is ever sent.
        return SAWItem(
            input_ids=tokens.input_ids,
            action_mask=tokens.action_mask,
            weight=weight,
            meta=meta,
            actor_logps=tokens.actor_logps,
            sampling_temperature=tokens.sampling_temperature,
        )
    return PackedSAWItem.from_arrays(
        input_ids=input_ids,
        action_runs=tokens.action_runs,
        weight=weight,
        meta=meta,
        actor_logps=logps,
        sampling_temperature=tokens.sampling_temperature,
    )


def rollout_to_saw_items(
    rollout: Rollout,
    weights: Mapping[RolloutStepKey, float],
    *,
    require_actor_logps: bool = False,
    retokenize_with: MessageTemplate | None = None,
) -> list[SAWItem]:
    """One :class:`SAWItem` per turn of ``rollout``.

    ``retokenize_with``: a chat template that turns message-level turns into tokens (SFT data; see
    :mod:`ludic_core.retokenize`); without it they are refused.

    Each item carries the behaviour logprobs when every call of its turn returned them. Whether a
    batch *must* carry them is the algorithm's to say (its spec's ``required_inputs``; trainers check
    them on every batch); ``require_actor_logps=True`` checks it here already, for callers that build
    items without a trainer. Failed rollouts are refused: their last turn may be cut mid-way.
    """
    if rollout.failure is not None:
        raise DataError(
            f"rollout {rollout.id!r} failed ({rollout.failure.stage}: {rollout.failure.error_type}); "
            "failed rollouts produce no training items"
        )
    need_logps = require_actor_logps
    facts = _RolloutFacts.of(rollout)
    items: list[SAWItem] = []
    for turn in _rollout_turns(rollout):
        where = _where(rollout, turn.turn_id)
        retokenized = retokenize_with is not None and any(is_message_level(s.info) for s in turn.agent_steps)
        if retokenized:
            tokens = _retokenized_turn(turn.agent_steps, check_template(retokenize_with), where)
        else:
            # Message-level calls are refused whole: that is how the run samples, not one bad rollout.
            _refuse_message_level(turn.agent_steps, where)
            try:
                tokens = concat_turn_tokens(turn.agent_steps, where=where)
            except DataError as error:
                raise UnbuildableRolloutError(rollout.id, str(error)) from error
        if need_logps and tokens.actor_logps is None:
            raise DataError(
                f"{where}: require_actor_logps=True asked for actor logprobs but the turn's model calls carry none"
            )
        key = (rollout.id, turn.final_step.index)
        if key not in weights:
            raise DataError(f"{where}: no credit for its final step {key}; the credit assigner skipped it")
        meta = _turn_meta(rollout, turn, tokens, facts)
        if retokenized:
            meta["retokenized"] = True
        items.append(_item(tokens, weights[key], meta))
    return items


def _rollout_turns(rollout: Rollout) -> list[Turn]:
    try:
        return split_turns(rollout)
    except DataError as error:
        raise UnbuildableRolloutError(rollout.id, str(error)) from error


def build_saw_items(
    rollouts: Sequence[Rollout],
    weights: Mapping[RolloutStepKey, float],
    *,
    require_actor_logps: bool = False,
    retokenize_with: MessageTemplate | None = None,
) -> list[SAWItem]:
    """:func:`rollout_to_saw_items` over many rollouts, in order; the first unbuildable rollout raises
    (:func:`ludic_core.engine.credited_items` drops and counts them instead)."""
    items: list[SAWItem] = []
    for rollout in rollouts:
        items.extend(
            rollout_to_saw_items(
                rollout, weights, require_actor_logps=require_actor_logps, retokenize_with=retokenize_with
            )
        )
    return items
