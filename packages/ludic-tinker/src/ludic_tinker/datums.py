"""SAW items → Tinker ``Datum``s: exactly one datum per item (one agent turn).

For tokens ``x_0 … x_{N-1}`` the datum has ``model_input = x_0 … x_{N-2}`` and ``target_tokens[i] =
x_{i+1}``; every tensor has ``model_input.length`` entries, non-zero only where the target is an action
token: ``logprobs`` (``SAWItem.actor_logps``), ``advantages`` or, for ``cross_entropy``, ``weights`` (the
item's weight times the loss's scale, :mod:`ludic_tinker.losses`), and ``sequence_ratio_mask`` (``gspo``).
Tinker scores untempered logits, so items sampled at a temperature other than 1 or 0 are refused for
losses that read ``logprobs``.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import tinker

from ludic_core.errors import DataError
from ludic_core.saw import SAWItem
from ludic_tinker.losses import Normalization, TinkerLoss

__all__ = [
    "DatumParts",
    "check_untempered",
    "item_to_datum",
    "items_to_datums",
    "normalization_scale",
]


@attrs.frozen
class DatumParts:
    """The token-level view of one SAW item in Tinker's shifted layout (plain lists, for tests too)."""

    model_input: tuple[int, ...]
    target_tokens: tuple[int, ...]
    action_positions: tuple[int, ...]
    """Positions ``i`` of ``model_input`` whose target ``target_tokens[i]`` is an action token."""
    sampler_logprobs: tuple[float, ...] | None
    """One per position (0.0 off actions), or None when the item has no ``actor_logps``."""


def datum_parts(item: SAWItem, index: int = 0, *, need_logprobs: bool) -> DatumParts:
    tokens, action_mask = list(item.input_ids), list(item.action_mask)
    if len(tokens) < 2:
        raise DataError(f"SAW item {index}: needs at least 2 tokens to train on, has {len(tokens)}")
    if action_mask[0]:
        raise DataError(f"SAW item {index}: the first token is marked as an action, but nothing predicts it")
    positions = tuple(i - 1 for i in range(1, len(tokens)) if action_mask[i])
    logps: tuple[float, ...] | None = None
    if item.actor_logps is not None:
        dense = [0.0] * (len(tokens) - 1)
        for pos, lp in zip(positions, item.actor_logps, strict=True):
            dense[pos] = lp
        logps = tuple(dense)
    elif need_logprobs:
        raise DataError(
            f"SAW item {index}: has no actor_logps, but the loss needs the sampler's logprobs; "
            "sample with ReturnSpec.for_rl()"
        )
    return DatumParts(tuple(tokens[:-1]), tuple(tokens[1:]), positions, logps)


def normalization_scale(normalization: Normalization, *, batch_size: int, num_actions: int) -> float:
    if normalization == "sum":
        return 1.0
    if normalization == "sequence_mean":
        return 1.0 / batch_size
    return 1.0 / (batch_size * max(1, num_actions))


def check_untempered(item: SAWItem, loss: TinkerLoss, index: int = 0) -> None:
    """Raise :class:`DataError` if ``loss`` compares logprobs and ``item`` was sampled at a temperature
    other than 1 (or 0): Tinker's learner logprobs are untempered, so every ratio would be off-policy."""
    temperature = item.sampling_temperature
    if loss.needs_sampler_logprobs and temperature is not None and temperature not in (0.0, 1.0):
        raise DataError(
            f"SAW item {index}: sampled at temperature {temperature!r}, but Tinker's {loss.loss_fn!r} loss "
            "compares its logprobs with the learner's, which Tinker computes at temperature 1 "
            "(forward_backward takes no temperature), so every importance ratio would be off-policy; "
            "sample at temperature 1.0 for Tinker training"
        )


def item_to_datum(item: SAWItem, loss: TinkerLoss, *, batch_size: int, index: int = 0) -> tinker.Datum:
    """The Tinker datum for one SAW item under ``loss``."""
    check_untempered(item, loss, index)
    parts = datum_parts(item, index, need_logprobs=loss.needs_sampler_logprobs)
    n = len(parts.model_input)
    scale = normalization_scale(
        loss.normalization, batch_size=batch_size, num_actions=len(parts.action_positions)
    )
    on_actions = np.zeros(n, dtype=np.float32)
    on_actions[list(parts.action_positions)] = 1.0
    inputs: dict[str, np.ndarray] = {"target_tokens": np.asarray(parts.target_tokens, dtype=np.int64)}
    per_token_weight = (on_actions * (item.weight * scale)).astype(np.float32)
    if loss.loss_fn == "cross_entropy":
        inputs["weights"] = per_token_weight
    else:
        inputs["advantages"] = per_token_weight
        assert parts.sampler_logprobs is not None  # datum_parts raised otherwise
        inputs["logprobs"] = np.asarray(parts.sampler_logprobs, dtype=np.float32)
    if loss.loss_fn == "gspo":
        inputs["sequence_ratio_mask"] = on_actions
    missing = set(loss.inputs) - set(inputs)
    if missing:  # a new loss in BUILTIN_LOSS_INPUTS without a rule here
        raise DataError(f"no rule builds loss_fn_inputs {sorted(missing)} for {loss.loss_fn!r}")
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(list(parts.model_input)),
        loss_fn_inputs={k: tinker.TensorData.from_numpy(v) for k, v in inputs.items()},
    )


def items_to_datums(items: Sequence[SAWItem], loss: TinkerLoss) -> list[tinker.Datum]:
    """One datum per item, in order. Items without action tokens are rejected, not silently dropped."""
    for i, item in enumerate(items):
        if item.num_action_tokens == 0:
            raise DataError(f"SAW item {i}: has no action tokens; filter such items before training")
    return [item_to_datum(item, loss, batch_size=len(items), index=i) for i, item in enumerate(items)]
