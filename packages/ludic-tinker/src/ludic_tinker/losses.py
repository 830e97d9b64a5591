"""Which loss Tinker computes, and how SAW weights become its per-token inputs.

Tinker's built-in losses are **sums** over tokens and datums. Ludic's
losses average over sequences (and, with ``length_normalize``, over each sequence's action tokens).
Every built-in objective below is linear in the per-token advantage (or CE weight), so the same
objective is obtained exactly by scaling each datum's advantages: by ``1/B`` (``normalization=
"sequence_mean"``) or ``1/(B·n_b)`` (``"token_mean_per_sequence"``), with B the batch size and n_b
the item's action-token count.

| ludic preset (loss)                                 | Tinker loss            | same objective?                                   |
|-----------------------------------------------------|------------------------|---------------------------------------------------|
| GRPO, Dr.GRPO (TokenClippedSurrogateLoss)           | ``ppo``                | yes: clip thresholds 1−ε_low / 1+ε_high, A scaled |
| CISPO, ScaleRL without KL (CISPOLoss)               | ``cispo``              | yes: thresholds 1−ε_low / 1+ε_high, A scaled      |
| GSPO (SequenceClippedSurrogateLoss, length-normal.) | ``gspo`` (SDK ≥ 0.34)  | GSPO-token form: same value and gradient for per-sequence advantages |
| SFT (MaskedCrossEntropyLoss)                        | ``cross_entropy``      | yes: weights = w_b scaled                         |
| on-policy REINFORCE                                 | ``importance_sampling``| token-level IS; equals REINFORCE's gradient only on-policy |
| (Tinker-native)                                     | ``dro``                | Tinker's DRO; no ludic preset                     |
| SAPO, GMPO, REINFORCE(+baseline), KL/entropy terms  | ``forward_backward_custom`` | with the ``[torch]`` extra, see :class:`CustomLoss` |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ludic_core.errors import ConfigError, missing_extra
from ludic_core.saw import SAWItem
from ludic_tinker._sdk import sdk_version, supported_loss_fns

if TYPE_CHECKING:
    import torch

__all__ = ["BUILTIN_LOSS_INPUTS", "CustomLoss", "Normalization", "TinkerLoss", "tinker_loss_for"]

Normalization = Literal["sum", "sequence_mean", "token_mean_per_sequence"]

BUILTIN_LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
    "gspo": ("target_tokens", "logprobs", "advantages", "sequence_ratio_mask"),
}
"""The ``loss_fn_inputs`` each built-in loss needs, every one of length ``model_input.length``."""

_CONFIG_KEYS: dict[str, frozenset[str]] = {
    "cross_entropy": frozenset(),
    "importance_sampling": frozenset(),
    "ppo": frozenset({"clip_low_threshold", "clip_high_threshold"}),
    "cispo": frozenset({"clip_low_threshold", "clip_high_threshold"}),
    "gspo": frozenset({"clip_low_threshold", "clip_high_threshold"}),
    "dro": frozenset({"beta"}),
}


def _float_dict(values: Mapping[str, float]) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(values).items()}


def _check_normalization(_i: Any, _a: Any, value: str) -> None:
    if value not in ("sum", "sequence_mean", "token_mean_per_sequence"):
        raise ConfigError(
            f"normalization must be 'sum', 'sequence_mean' or 'token_mean_per_sequence', got {value!r}"
        )


@attrs.frozen
class TinkerLoss:
    """A loss Tinker computes server-side (``forward_backward(data, loss_fn, config)``)."""

    loss_fn: str
    config: Mapping[str, float] = attrs.field(factory=dict, converter=_float_dict)
    normalization: Normalization = attrs.field(default="sequence_mean", validator=_check_normalization)
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.loss_fn not in BUILTIN_LOSS_INPUTS:
            raise ConfigError(f"loss_fn must be one of {sorted(BUILTIN_LOSS_INPUTS)}, got {self.loss_fn!r}")
        unknown = set(self.config) - _CONFIG_KEYS[self.loss_fn]
        if unknown:
            raise ConfigError(
                f"loss_fn_config keys {sorted(unknown)} do not apply to {self.loss_fn!r} "
                f"(it takes {sorted(_CONFIG_KEYS[self.loss_fn]) or 'none'})"
            )
        lo, hi = self.config.get("clip_low_threshold"), self.config.get("clip_high_threshold")
        if lo is not None and hi is not None and not lo < 1.0 < hi:
            raise ConfigError(f"clip thresholds must satisfy low < 1 < high, got low={lo!r} high={hi!r}")

    @property
    def inputs(self) -> tuple[str, ...]:
        return BUILTIN_LOSS_INPUTS[self.loss_fn]

    @property
    def needs_sampler_logprobs(self) -> bool:
        return "logprobs" in self.inputs

    def check_supported(self) -> None:
        """Raise :class:`ConfigError` if the installed SDK does not know this loss."""
        if self.loss_fn not in supported_loss_fns():
            version = ".".join(map(str, sdk_version()))
            raise ConfigError(
                f"the installed tinker SDK {version} has no {self.loss_fn!r} loss "
                f"(it has {sorted(supported_loss_fns())}); upgrade tinker or pick another loss"
            )

    # Constructors named after Tinker's losses.
    @classmethod
    def importance_sampling(cls, *, normalization: Normalization = "sequence_mean") -> TinkerLoss:
        return cls("importance_sampling", normalization=normalization)

    @classmethod
    def ppo(
        cls, *, clip_low: float = 0.8, clip_high: float = 1.2, normalization: Normalization = "sequence_mean"
    ) -> TinkerLoss:
        return cls(
            "ppo",
            {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high},
            normalization=normalization,
        )

    @classmethod
    def cispo(
        cls, *, clip_low: float = 0.8, clip_high: float = 1.2, normalization: Normalization = "sequence_mean"
    ) -> TinkerLoss:
        return cls(
            "cispo",
            {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high},
            normalization=normalization,
        )

    @classmethod
    def gspo(cls, *, clip_low: float = 1 - 3e-4, clip_high: float = 1 + 4e-4) -> TinkerLoss:
        return cls(
            "gspo",
            {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high},
            normalization="token_mean_per_sequence",
        )

    @classmethod
    def dro(cls, *, beta: float, normalization: Normalization = "sequence_mean") -> TinkerLoss:
        return cls("dro", {"beta": beta}, normalization=normalization)

    @classmethod
    def cross_entropy(cls, *, normalization: Normalization = "sequence_mean") -> TinkerLoss:
        return cls("cross_entropy", normalization=normalization)


CustomLossFn = Callable[[Sequence[SAWItem], "list[torch.Tensor]"], "tuple[torch.Tensor, dict[str, float]]"]


@attrs.frozen
class CustomLoss:
    """A loss computed locally from the learner's per-token logprobs (``forward_backward_custom``).

    ``fn(items, action_logprobs)`` gets the SAW items and, for each, a 1-D tensor (with grad) of the
    learner's logprobs of that item's action tokens, in order; it returns ``(scalar_loss, metrics)``.
    Tinker then backpropagates ``dLoss/dlogprobs`` server-side (about 1.5× the cost of a built-in
    loss). Needs torch: ``pip install "ludic-tinker[torch]"``. The learner's logprobs are untempered
    (``softmax(logits)``); a ``fn`` that compares them with ``item.actor_logps`` must account for
    ``item.sampling_temperature`` itself.
    """

    fn: CustomLossFn
    name: str = "custom"

    @property
    def needs_sampler_logprobs(self) -> bool:
        return False

    @staticmethod
    def require_torch() -> None:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise missing_extra("ludic-tinker", "torch", "torch") from exc


def _loss_attr(loss: Any, name: str, default: Any) -> Any:
    return getattr(loss, name, default)


def tinker_loss_for(algorithm: Any) -> TinkerLoss:
    """The built-in Tinker loss that computes the same objective as a ludic-train algorithm's loss.

    ``algorithm`` is a ludic-train ``RLAlgorithm`` (or its ``loss``); the mapping is by the loss's class
    and hyper-parameters (see the table in this module's docstring). Raises :class:`ConfigError`, naming
    the loss, when Tinker has no built-in equivalent: use :class:`CustomLoss` for those.
    """
    loss = getattr(algorithm, "loss", algorithm)
    kind = type(loss).__name__
    length_normalize = bool(_loss_attr(loss, "length_normalize", False))
    norm: Normalization = "token_mean_per_sequence" if length_normalize else "sequence_mean"
    if _loss_attr(loss, "ratio_clip", None) is not None:
        raise ConfigError(f"{kind} with ratio_clip has no Tinker built-in equivalent; use CustomLoss")
    eps_lo, eps_hi = _loss_attr(loss, "clip_eps_low", None), _loss_attr(loss, "clip_eps_high", None)
    if kind == "TokenClippedSurrogateLoss":
        return TinkerLoss.ppo(clip_low=1 - eps_lo, clip_high=1 + eps_hi, normalization=norm)
    if kind == "CISPOLoss":
        return TinkerLoss.cispo(clip_low=1 - eps_lo, clip_high=1 + eps_hi, normalization=norm)
    if kind in ("SequenceClippedSurrogateLoss", "ClippedSurrogateLoss") and length_normalize:
        tl = TinkerLoss.gspo(clip_low=1 - eps_lo, clip_high=1 + eps_hi)
        tl.check_supported()
        return tl
    if kind in ("MaskedCrossEntropyLoss", "MaskedCausalLMCrossEntropyLoss"):
        return TinkerLoss.cross_entropy(normalization=norm)
    raise ConfigError(
        f"{kind} has no Tinker built-in equivalent; train it with CustomLoss "
        '(forward_backward_custom, needs pip install "ludic-tinker[torch]")'
    )
