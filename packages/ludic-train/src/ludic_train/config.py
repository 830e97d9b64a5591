"""Trainer configuration (a frozen value validated at construction)."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError
from ludic_core.run.training import TrainerSettings
from ludic_core.validation import boolean, int_at_least, one_of

__all__ = ["FROM_TOKENIZER", "TrainerConfig", "resolve_pad_token_id"]

FROM_TOKENIZER = -1
"""``TrainerConfig.pad_token_id`` in a recipe's config: the id comes from the recipe's tokenizer."""


def resolve_pad_token_id(tokenizer_or_id: Any) -> int:
    """An int passes through; a tokenizer gives its ``pad_token_id``, else its ``eos_token_id``."""
    if isinstance(tokenizer_or_id, bool):
        raise ConfigError(f"pad_token_id must be an int or a tokenizer, got {tokenizer_or_id!r}")
    if isinstance(tokenizer_or_id, int):
        return tokenizer_or_id
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer_or_id, attr, None)
        if isinstance(value, int):
            return value
    raise ConfigError(
        f"pad_token_id: {type(tokenizer_or_id).__name__} has neither pad_token_id nor eos_token_id; pass an int"
    )


_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "npu", "xla", "meta")


def _device(_instance: Any, _attribute: Any, value: object) -> None:
    """``None`` or a torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``), checked without torch so
    that a typo fails before any model loads."""
    if value is None:
        return
    kind, _, index = value.partition(":") if isinstance(value, str) else ("", "", "")
    if kind not in _DEVICE_TYPES or (index and not index.isdigit()):
        raise ConfigError(
            f"TrainerConfig.device must be None or a torch device such as 'cpu', 'cuda' or 'cuda:1' "
            f"(types {list(_DEVICE_TYPES)}), got {value!r}"
        )


@attrs.frozen(kw_only=True)
class TrainerConfig(TrainerSettings):
    """Everything the optimisation loop needs; nothing about envs or rollouts. The optimiser settings
    every backend shares (``lr``, ``weight_decay``, ``betas``, ``eps``, ``max_grad_norm``: 0 disables
    clipping; ``eval_every_steps``: 0 never) are :class:`~ludic_core.run.training.TrainerSettings`.

    * ``pad_token_id`` — an int or a tokenizer (reduced to its pad, else eos id); :data:`FROM_TOKENIZER`
      (-1) in a recipe's config: the recipe fills in its tokenizer's.
    * ``device`` — where the model and micro-batches live (``None``: CUDA when available, else CPU).
    * ``optimizer`` — ``"adamw"``, or ``"sgd"`` (plain SGD with ``lr``, handy for exact-gradient
      checks); only parameters with ``requires_grad`` are optimised.
    * ``max_seq_len`` — truncation of every item.
    * ``micro_token_budget`` — the padded-token budget per micro-batch (``longest item x items``; an
      item longer than it trains alone); None: derived from the model's shape and the device's memory
      (:mod:`ludic_train.memory_budget`).
    * ``publish_every_steps`` — publish weights every N steps with ``version = step`` (0: never).
    * ``cast_logits_to_fp32`` — compute the loss on fp32 logits (else the model's dtype, e.g. bf16).
    * ``gradient_checkpointing`` — trade compute for activation memory (HF models).
    * ``share_prompt_prefix`` — pack items that share a whole prompt (a GRPO group's replies) into the
      same micro-batches, and run a prompt prefix that every row of a micro-batch shares once,
      repeating its KV cache per row (:mod:`ludic_train.microbatch`, :mod:`ludic_train.policy_forward`;
      same loss and gradient up to float rounding). Off under FSDP2 and with gradient checkpointing.
    * ``skip_zero_weight_items`` — leave items of weight 0 out of the forward pass when the loss says
      they add nothing (``zero_weight_items_inert``: the policy-gradient and SFT losses; not the KL or
      entropy terms). The loss stays the mean over every item; stats are means over the items that ran.
    * ``max_lag`` — drop items whose ``meta["policy_version"]`` is more than this many steps behind.
    * ``max_refills`` — how many consecutive empty batches (everything stale or filtered) before giving up.
    * ``eval_at_start`` — evaluate before the first step too.
    * ``max_consecutive_skipped_steps`` — a step whose loss or gradient norm is not finite is skipped
      (its gradients are dropped, the weights and optimiser state stay as they were); this many
      skipped steps in a row raise instead, since the run is no longer recovering on its own.
    """

    pad_token_id: int = attrs.field(converter=resolve_pad_token_id, validator=int_at_least(FROM_TOKENIZER))
    device: str | None = attrs.field(default=None, validator=_device)
    optimizer: Literal["adamw", "sgd"] = attrs.field(default="adamw", validator=one_of("adamw", "sgd"))
    max_seq_len: int = attrs.field(default=1024, validator=int_at_least(1))
    micro_token_budget: int | None = attrs.field(default=None, validator=int_at_least(1, optional=True))
    publish_every_steps: int = attrs.field(default=1, validator=int_at_least(0))
    cast_logits_to_fp32: bool = attrs.field(default=False, validator=boolean())
    gradient_checkpointing: bool = attrs.field(default=False, validator=boolean())
    share_prompt_prefix: bool = attrs.field(default=True, validator=boolean())
    skip_zero_weight_items: bool = attrs.field(default=True, validator=boolean())
    max_lag: int | None = attrs.field(default=None, validator=int_at_least(0, optional=True))
    max_refills: int = attrs.field(default=100, validator=int_at_least(1))
    log_every: int = attrs.field(default=1, validator=int_at_least(1))
    eval_at_start: bool = attrs.field(default=False, validator=boolean())
    max_consecutive_skipped_steps: int = attrs.field(default=3, validator=int_at_least(1))

    def resolved_device(self) -> str:
        if self.device is not None:
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
