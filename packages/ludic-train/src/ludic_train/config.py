"""Trainer configuration (a frozen value validated at construction)."""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError

__all__ = ["TrainerConfig", "resolve_pad_token_id"]


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


def _positive(name: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
            raise ConfigError(f"TrainerConfig.{name} must be > 0, got {value!r}")

    return check


def _non_negative_int(name: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(f"TrainerConfig.{name} must be an int >= 0, got {value!r}")

    return check


def _positive_int(name: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"TrainerConfig.{name} must be an int >= 1, got {value!r}")

    return check


def _boolean(name: str) -> Any:
    def check(_i: Any, _a: Any, value: Any) -> None:
        if not isinstance(value, bool):
            raise ConfigError(f"TrainerConfig.{name} must be true or false, got {value!r}")

    return check


@attrs.frozen
class TrainerConfig:
    """Everything the optimisation loop needs; nothing about envs or rollouts.

    * ``pad_token_id`` — an int or a tokenizer (reduced to its pad, else eos id).
    * ``device`` — where the model and micro-batches live (``None``: CUDA when available, else CPU).
    * optimiser — AdamW with ``lr``, ``weight_decay``, ``betas``, ``eps`` (``optimizer="adamw"``), or
      ``"sgd"`` (plain SGD, handy for exact-gradient checks); only parameters with ``requires_grad``
      are optimised.
    * ``max_grad_norm`` — clip the global gradient norm (``None`` disables clipping).
    * ``max_seq_len`` / ``micro_token_budget`` — truncation and the padded-token budget per micro-batch.
    * ``publish_every_steps`` — publish weights every N steps with ``version = step`` (0: never).
    * ``cast_logits_to_fp32`` — compute the loss on fp32 logits (else the model's dtype, e.g. bf16).
    * ``gradient_checkpointing`` — trade compute for activation memory (HF models).
    * ``share_prompt_prefix`` — run a prompt prefix that every row of a micro-batch shares once and
      repeat its KV cache per row (:mod:`ludic_train.policy_forward`; same loss and gradient up to float
      rounding). Off under FSDP2 and with gradient checkpointing.
    * ``skip_zero_weight_items`` — leave items of weight 0 out of the forward pass when the loss says
      they add nothing (``zero_weight_items_inert``: the policy-gradient and SFT losses; not the KL or
      entropy terms). The loss stays the mean over every item; stats are means over the items that ran.
    * ``max_lag`` — drop items whose ``meta["policy_version"]`` is more than this many steps behind.
    * ``max_refills`` — how many consecutive empty batches (everything stale or filtered) before giving up.
    * ``eval_at_start`` / ``eval_every_steps`` — when the trainer's evaluator runs.
    * ``max_consecutive_skipped_steps`` — a step whose loss or gradient norm is not finite is skipped
      (its gradients are dropped, the weights and optimiser state stay as they were); this many
      skipped steps in a row raise instead, since the run is no longer recovering on its own.
    """

    pad_token_id: int = attrs.field(converter=resolve_pad_token_id)
    device: str | None = None
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = attrs.field(default=1e-5, validator=_positive("lr"))
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = attrs.field(default=1e-8, validator=_positive("eps"))
    max_grad_norm: float | None = attrs.field(default=1.0, validator=_positive("max_grad_norm"))
    max_seq_len: int = attrs.field(default=1024, validator=_positive("max_seq_len"))
    micro_token_budget: int = attrs.field(default=8192, validator=_positive("micro_token_budget"))
    publish_every_steps: int = attrs.field(default=1, validator=_non_negative_int("publish_every_steps"))
    cast_logits_to_fp32: bool = False
    gradient_checkpointing: bool = False
    share_prompt_prefix: bool = attrs.field(default=True, validator=_boolean("share_prompt_prefix"))
    skip_zero_weight_items: bool = attrs.field(default=True, validator=_boolean("skip_zero_weight_items"))
    max_lag: int | None = attrs.field(default=None, validator=_non_negative_int("max_lag"))
    max_refills: int = attrs.field(default=100, validator=_positive("max_refills"))
    log_every: int = attrs.field(default=1, validator=_positive("log_every"))
    eval_at_start: bool = False
    eval_every_steps: int | None = attrs.field(default=None, validator=_positive("eval_every_steps"))
    max_consecutive_skipped_steps: int = attrs.field(
        default=3, validator=_positive_int("max_consecutive_skipped_steps")
    )

    def __attrs_post_init__(self) -> None:
        if self.optimizer not in ("adamw", "sgd"):
            raise ConfigError(f"TrainerConfig.optimizer must be 'adamw' or 'sgd', got {self.optimizer!r}")
        if self.micro_token_budget < self.max_seq_len:
            raise ConfigError(
                f"TrainerConfig.micro_token_budget ({self.micro_token_budget}) must be >= max_seq_len "
                f"({self.max_seq_len}): one full-length item must fit in a micro-batch"
            )
        if self.weight_decay < 0:
            raise ConfigError(f"TrainerConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"TrainerConfig.betas must be two numbers in [0, 1), got {self.betas!r}")

    def resolved_device(self) -> str:
        if self.device is not None:
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
