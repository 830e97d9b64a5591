"""The loss contract, the shared token-logprob context and the per-sequence reduction every loss uses.

A collated micro-batch (:mod:`ludic_train.collate`) holds ``input_ids``, ``attention_mask`` and
``action_mask`` ``[B,T]``, ``weight`` and ``temperature`` ``[B]``, ``logit_positions [K]`` and, when the
items carry them, ``actor_logps`` / ``teacher_logps [B,T]`` and ``old_logp_action [B]``. Every loss
scores the sampling distribution ``softmax(logits / τ_b)`` (τ = 1 when absent), so on-policy ratios are
1 at any temperature; takes ``logits`` as ``[B, T, V]`` or as ``[B, K, V]`` at ``logit_positions`` (every
position before an action token), with the same values; scores token ``t+1`` with the logits at ``t``
(per-token quantities on ``[B, T-1]``, masked by ``action_mask[:, 1:]``); and returns a mean over
sequences of per-sequence terms (masked sums, divided by the action-token count when
``length_normalize``), so micro-batch losses scaled by :func:`ludic_train.microbatch.micro_loss_scale`
sum to the macro-batch's gradient exactly. Stats are detached 0-d tensors (:func:`stats_to_host`).
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import ClassVar, Protocol, runtime_checkable

import attrs
import torch
from torch import Tensor

from ludic_core.algorithms.losses import LossSpec
from ludic_core.errors import DataError
from ludic_train.losses._gather import action_rows, gather_token_logp

__all__ = [
    "Loss",
    "SequenceLoss",
    "Stats",
    "TokenLoss",
    "TokenLogpContext",
    "WeightedLoss",
    "require_key",
    "shared_token_context",
    "stats_to_host",
    "token_context",
]

Stats = dict[str, Tensor]
"""Loss statistics: name → detached 0-d tensor."""


@runtime_checkable
class Loss(Protocol):
    """Anything that turns a model's logits on a collated micro-batch into a scalar loss and stats.

    The returned loss must be a mean over the batch's sequences (see the module docstring); trainers
    rely on it to combine micro-batches exactly.
    """

    def compute(self, logits: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]: ...


def require_key(batch: Mapping[str, Tensor], key: str, *, who: str) -> Tensor:
    """``batch[key]``, or a :class:`DataError` saying which loss needed it and how to provide it."""
    try:
        return batch[key]
    except KeyError:
        raise DataError(
            f"{who} needs batch[{key!r}], which is missing (present: {sorted(batch)}); "
            f"the SAW items must carry {_ITEM_FIELD.get(key, key)}"
        ) from None


HOW_TO_PROVIDE: dict[str, str] = {
    "actor_logps": (
        "sample the rollouts with chosen-token logprobs: ReturnSpec(return_chosen_logprobs=True), e.g. "
        "RolloutRequest(..., inference=InferenceSpec(return_=ReturnSpec.for_rl()))"
    ),
    "teacher_logps": (
        "score the batches with the teachers: TeacherScoredBatchSource(source, TeacherScorer(teachers)) "
        "from ludic_core.teachers (teachers must return prompt logprobs)"
    ),
}
"""For each optional SAW item field a loss can need, how a run makes its items carry it."""

_ITEM_FIELD = {
    "actor_logps": "actor_logps (behaviour-policy logprobs from the sampler; "
    + HOW_TO_PROVIDE["actor_logps"]
    + ")",
    "old_logp_action": "actor_logps (behaviour-policy logprobs from the sampler; "
    + HOW_TO_PROVIDE["actor_logps"]
    + ")",
    "teacher_logps": "teacher_logps (teacher logprobs of the sampled tokens)",
}


@attrs.frozen
class _ActionIndex:
    """Where the ``N`` action tokens of a micro-batch are, as integer indices (row-major order).

    ``grid`` indexes the shifted ``[B, T-1]`` grid flattened, ``rows`` the logits seen as ``[-1, V]``
    (``[B, T, V]`` or ``[B, K, V]``), ``targets`` are the tokens scored there and ``temperature`` each
    row's sampling temperature (None for τ = 1). Built once per context from the action mask; the
    token logprobs and the entropy both read the rows through it.
    """

    grid: Tensor
    rows: Tensor
    targets: Tensor
    temperature: Tensor | None

    @classmethod
    def build(cls, ctx: TokenLogpContext) -> _ActionIndex:
        length = int(ctx.input_ids.shape[1])
        grid = ctx.mask_bool.reshape(-1).nonzero().squeeze(1)
        sequence = torch.div(grid, length - 1, rounding_mode="floor")
        position = grid - sequence * (length - 1)
        if ctx.positions is None:
            rows = sequence * length + position
        else:
            # The column of each position in the [B, K, V] logits (validated to cover every action).
            column = torch.full((length - 1,), -1, dtype=torch.long, device=grid.device)
            column[ctx.positions] = torch.arange(ctx.positions.shape[0], device=grid.device)
            rows = sequence * ctx.positions.shape[0] + column[position]
        targets = ctx.input_ids[sequence, position + 1]
        temperature = None if ctx.temperature is None else ctx.temperature.to(ctx.dtype)[sequence]
        return cls(grid=grid, rows=rows, targets=targets, temperature=temperature)


class TokenLogpContext:
    """Per-forward-pass quantities shared by every loss term computed on the same logits.

    ``token_logp`` and ``entropy`` are computed lazily, once, and only at action positions: the rows of
    ``logits`` that score a sampled completion token are gathered, upcast to float32 and divided by
    their sequence's temperature before the log-softmax, so long prompts cost nothing and bf16 logits
    do not lose precision in the normaliser (float32 and float64 logits keep their dtype). Both tensors
    are ``[B, T-1]`` with zeros off the action positions. The rows are found once, as integer indices
    (:class:`_ActionIndex`), and the token logprobs come from one fused gather
    (:mod:`ludic_train.losses._gather`) whose backward writes the action rows' gradient straight into
    the logits' gradient, rather than selecting with the boolean mask and scattering back through it. ``logits`` is ``[B, T, V]``, or ``[B, K, V]``
    at ``batch["logit_positions"]`` (see the module docstring).
    """

    def __init__(self, logits: Tensor, batch: Mapping[str, Tensor]) -> None:
        input_ids = require_key(batch, "input_ids", who="TokenLogpContext")
        action_mask = require_key(batch, "action_mask", who="TokenLogpContext")
        if logits.dim() != 3:
            raise DataError(f"logits must be [B, T, V]; got shape {tuple(logits.shape)}")
        if tuple(action_mask.shape) != tuple(input_ids.shape):
            raise DataError(
                f"action_mask shape {tuple(action_mask.shape)} does not match input_ids {tuple(input_ids.shape)}"
            )
        if input_ids.shape[1] < 2:
            raise DataError(f"sequences need at least 2 tokens for the causal shift; T={input_ids.shape[1]}")
        self.logits = logits
        self.input_ids = input_ids
        self.targets = input_ids[:, 1:]
        self.dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        """Precision of every per-token quantity: float32, or float64 for float64 logits."""
        self.mask = action_mask[:, 1:].to(self.dtype)
        """``[B, T-1]`` float mask of the positions whose *next* token is an action token."""
        self.mask_bool = self.mask > 0
        self.token_counts = self.mask.sum(dim=1).clamp(min=1.0)
        """``n_b``: action tokens per sequence (at least 1, so empty sequences contribute 0, not NaN)."""
        self.positions = self._logit_positions(logits, batch)
        """The sequence positions of ``logits``' second dimension, or None when it covers all ``T``."""
        self.temperature = self._temperature(batch)
        self._index: _ActionIndex | None = None
        self._token_logp: Tensor | None = None
        self._entropy: Tensor | None = None

    def _logit_positions(self, logits: Tensor, batch: Mapping[str, Tensor]) -> Tensor | None:
        batch_size, length = self.input_ids.shape
        positions = batch.get("logit_positions")
        if logits.shape[0] == batch_size and logits.shape[1] == length:
            return None
        if positions is not None and (positions.dim() != 1 or positions.dtype != torch.long):
            raise DataError(
                f"batch['logit_positions'] must be a 1-D long tensor, got {positions.dtype} {tuple(positions.shape)}"
            )
        if positions is None or tuple(logits.shape[:2]) != (batch_size, positions.shape[0]):
            shown = "absent" if positions is None else f"has {positions.shape[0]} positions"
            raise DataError(
                f"logits shape {tuple(logits.shape)} does not match input_ids shape {tuple(self.input_ids.shape)} "
                f"(nor [B, K, V] for the batch's logit_positions, which is {shown})"
            )
        covered = torch.zeros(length - 1, dtype=torch.bool, device=self.mask_bool.device)
        covered[positions.clamp(0, length - 2)] = True
        bad = (self.mask_bool & ~covered).any()  # an action position without its logits
        bad |= (positions[1:] <= positions[:-1]).any()  # rows are gathered in increasing position order
        bad |= ((positions < 0) | (positions > length - 2)).any()
        # One host sync for all three checks, as cheap as the one the boolean gather of the rows makes.
        if bool(bad):
            needed = sorted(set((self.mask_bool.nonzero()[:, 1]).tolist()))
            raise DataError(
                "batch['logit_positions'] must be strictly increasing positions in "
                f"[0, {length - 2}] that include every position whose next token is an action token "
                f"({needed[:20]}); got {positions.tolist()[:20]}"
            )
        return positions

    def _temperature(self, batch: Mapping[str, Tensor]) -> Tensor | None:
        temperature = batch.get("temperature")
        if temperature is None:
            return None
        if tuple(temperature.shape) != (self.batch_size,):
            raise DataError(
                f"batch['temperature'] has shape {tuple(temperature.shape)}; expected ({self.batch_size},)"
            )
        return temperature

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    def _action_index(self) -> _ActionIndex:
        if self._index is None:
            self._index = _ActionIndex.build(self)
        return self._index

    def _on_grid(self, values: Tensor) -> Tensor:
        """``[N]`` per-action values → ``[B, T-1]`` with zeros elsewhere (differentiable ``index_copy``)."""
        index = self._action_index()
        out = values.new_zeros(self.mask.numel())
        return out.index_copy(0, index.grid, values).view(self.mask.shape)

    @property
    def token_logp(self) -> Tensor:
        """``[B, T-1]`` log-probability of each next token under the current policy (0 off actions)."""
        if self._token_logp is None:
            # A loss may first touch the cache inside a no_grad block (for a detached weight); the cached
            # tensor must still carry the graph. enable_grad builds nothing when logits need no grad.
            with torch.enable_grad():
                index = self._action_index()
                values = gather_token_logp(
                    self.logits, index.rows, index.targets, index.temperature, self.dtype
                )
                self._token_logp = self._on_grid(values)
        return self._token_logp

    @property
    def entropy(self) -> Tensor:
        """``[B, T-1]`` entropy of the next-token distribution at each action position (0 elsewhere)."""
        if self._entropy is None:
            with torch.enable_grad():
                index = self._action_index()
                rows = action_rows(self.logits, index.rows, self.dtype, index.temperature)
                logp = torch.log_softmax(rows, dim=-1)
                values = -(logp.exp() * logp).sum(dim=-1)
                self._entropy = self._on_grid(values)
        return self._entropy

    def shifted(self, per_position: Tensor, *, key: str) -> Tensor:
        """Align a ``[B, T]`` per-token tensor from the batch (e.g. ``actor_logps``) with the shifted grid."""
        if tuple(per_position.shape) != tuple(self.input_ids.shape):
            raise DataError(
                f"batch[{key!r}] has shape {tuple(per_position.shape)}; expected {tuple(self.input_ids.shape)}"
            )
        return per_position[:, 1:].to(self.dtype)

    def reduce(self, per_token: Tensor, *, length_normalize: bool) -> Tensor:
        """Masked sum per sequence (÷ ``n_b`` when ``length_normalize``): ``[B, T-1] → [B]``."""
        summed = (per_token * self.mask).sum(dim=1)
        return summed / self.token_counts if length_normalize else summed

    def sequence_logp(self, *, length_normalize: bool) -> Tensor:
        """``log π(a_b)`` per sequence (mean per token when ``length_normalize``)."""
        return self.reduce(self.token_logp, length_normalize=length_normalize)

    def masked_token_mean(self, per_token: Tensor) -> Tensor:
        """Mean of a per-token quantity over every action token in the batch (for stats)."""
        return (per_token * self.mask).sum() / self.mask.sum().clamp(min=1.0)


_ACTIVE_CONTEXT: contextvars.ContextVar[TokenLogpContext | None] = contextvars.ContextVar(
    "ludic_train_active_token_context", default=None
)


def token_context(logits: Tensor, batch: Mapping[str, Tensor]) -> TokenLogpContext:
    """The shared context for these logits if one is active (see :func:`shared_token_context`), else a new one."""
    active = _ACTIVE_CONTEXT.get()
    if active is not None and active.logits is logits and active.input_ids is batch.get("input_ids"):
        return active
    return TokenLogpContext(logits, batch)


@contextlib.contextmanager
def shared_token_context(logits: Tensor, batch: Mapping[str, Tensor]) -> Iterator[TokenLogpContext]:
    """Within the block, every loss computed on these exact logits reuses one log-softmax.

    :class:`~ludic_train.losses.composite.CompositeLoss` opens one around its terms, so third-party
    losses that call :func:`token_context` share the computation too.
    """
    ctx = token_context(logits, batch)
    token = _ACTIVE_CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _ACTIVE_CONTEXT.reset(token)


class SequenceLoss(LossSpec, abc.ABC):
    """Base for Ludic's losses: subclasses build one loss term per sequence; ``compute`` averages them.

    Exposing the per-sequence terms lets wrappers reweight sequences (the sequence-level truncated
    importance-sampling correction) and lets :class:`CompositeLoss` share one context. A torch loss is a
    loss spec (``ludic_core.algorithms.LossSpec``) that computes itself, so an ``AlgorithmSpec`` takes
    it as its loss; each built-in one subclasses the spec it computes and so shares its fields,
    defaults and checks, and ``required_inputs`` (the SAW item fields it reads) comes from there.
    """

    @property
    def token_decomposable(self) -> bool:
        return False

    weight_proportional: ClassVar[bool] = False
    """Whether each sequence's term is its item's weight times a finite factor, so that an item of
    weight 0 adds exactly nothing to the loss and its gradient (see :meth:`zero_weight_items_inert`)."""

    def zero_weight_items_inert(self) -> bool:
        """Whether items of weight 0 may be left out of the forward pass without changing the loss (a
        mean over every item, the left-out ones counted as 0) or its gradient. A trainer skips them
        then: GRPO groups whose games all end alike carry advantage 0 on every item."""
        return self.weight_proportional

    @abc.abstractmethod
    def sequence_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        """``([B] per-sequence loss terms, stats)``; the loss is their mean."""

    def compute(self, logits: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        ctx = token_context(logits, batch)
        per_sequence, stats = self.sequence_terms(ctx, batch)
        loss = per_sequence.mean()
        stats["loss"] = loss.detach()
        return loss, stats


class WeightedLoss:
    """Mixin of a loss whose sequence term is its item's weight (``batch["weight"]``, the advantage or
    sample weight) times a finite factor, so items of weight 0 are inert."""

    __slots__ = ()
    weight_proportional: ClassVar[bool] = True

    def item_weights(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> Tensor:
        """The ``[B]`` item weights in the context's dtype."""
        return require_key(batch, "weight", who=type(self).__name__).to(ctx.dtype)


class TokenLoss(SequenceLoss):
    """A loss whose sequence term is a masked reduction of per-token terms.

    Exposing the per-token terms lets the token-level truncated importance-sampling correction weight
    each token before the reduction.
    """

    length_normalize: bool

    @property
    def token_decomposable(self) -> bool:
        return True

    @abc.abstractmethod
    def token_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        """``([B, T-1] per-token loss terms on the shifted grid, stats)``."""

    def sequence_terms(self, ctx: TokenLogpContext, batch: Mapping[str, Tensor]) -> tuple[Tensor, Stats]:
        per_token, stats = self.token_terms(ctx, batch)
        return ctx.reduce(per_token, length_normalize=self.length_normalize), stats


def population_std(values: Tensor) -> Tensor:
    """Std with ``1/N`` (defined for a single element, where it is 0)."""
    return values.std(unbiased=False) if values.numel() > 1 else values.new_zeros(())


def advantage_stats(advantages: Tensor) -> Stats:
    return {"adv_mean": advantages.mean().detach(), "adv_std": population_std(advantages).detach()}


def stats_to_host(stats: Mapping[str, Tensor]) -> dict[str, float]:
    """Every stat as a Python float, with a single device→host transfer (one ``stack(...).tolist()``)."""
    if not stats:
        return {}
    names = list(stats)
    values = torch.stack([stats[name].detach().reshape(()).to(torch.float32) for name in names]).tolist()
    return dict(zip(names, values, strict=True))
