"""Which loss Tinker computes, and how SAW weights become its per-token inputs.

Tinker's built-in losses are sums over tokens and datums; Ludic's average over sequences (and, with
``length_normalize``, over each sequence's action tokens). Every built-in objective is linear in the
per-token advantage (or CE weight), so scaling each datum's advantages by ``1/B``
(``normalization="sequence_mean"``) or ``1/(B·n_b)`` (``"token_mean_per_sequence"``) gives the same
objective exactly. :func:`tinker_loss_for` maps a loss spec by its type: ``ClippedSurrogate`` to
``ppo`` (token level) or ``gspo`` (sequence level), ``CISPO`` to ``cispo``, ``CrossEntropy`` to
``cross_entropy``, ``Reinforce`` and untruncated token-level ``TruncatedIS(Reinforce)`` to
``importance_sampling``; any other spec raises, naming :class:`CustomLoss`. The full table is in
docs/packages/ludic-tinker.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ludic_core.algorithms.losses import (
    CISPO,
    GMPO,
    SAPO,
    ClippedSurrogate,
    Composite,
    CrossEntropy,
    Entropy,
    LossSpec,
    Reinforce,
    ReverseKL,
    TokenKL,
    TruncatedIS,
)
from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.errors import ConfigError, missing_extra
from ludic_core.saw import SAWItem
from ludic_tinker._sdk import sdk_version, supported_loss_fns

if TYPE_CHECKING:
    import torch

__all__ = [
    "BUILTIN_LOSS_INPUTS",
    "CustomLoss",
    "Normalization",
    "TinkerLoss",
    "tinker_loss_for",
]

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

    # Constructors named after Tinker's losses; ``options`` are the other fields (``normalization``, ``name``).
    @classmethod
    def importance_sampling(cls, **options: Any) -> TinkerLoss:
        return cls("importance_sampling", **options)

    @classmethod
    def ppo(cls, *, clip_low: float, clip_high: float, **options: Any) -> TinkerLoss:
        return cls("ppo", {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high}, **options)

    @classmethod
    def cispo(cls, *, clip_low: float, clip_high: float, **options: Any) -> TinkerLoss:
        return cls("cispo", {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high}, **options)

    @classmethod
    def gspo(cls, *, clip_low: float, clip_high: float) -> TinkerLoss:
        # Tinker's gspo clips the geometric mean of the token ratios: a per-token mean per sequence.
        return cls(
            "gspo",
            {"clip_low_threshold": clip_low, "clip_high_threshold": clip_high},
            normalization="token_mean_per_sequence",
        )

    @classmethod
    def dro(cls, *, beta: float, **options: Any) -> TinkerLoss:
        return cls("dro", {"beta": beta}, **options)

    @classmethod
    def cross_entropy(cls, **options: Any) -> TinkerLoss:
        return cls("cross_entropy", **options)


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


def _normalization(length_normalize: bool) -> Normalization:
    return "token_mean_per_sequence" if length_normalize else "sequence_mean"


class _Unsupported(Exception):
    """Why a spec has no Tinker built-in (turned into the ConfigError that names the spec)."""


def _no_ratio_clip(spec: ClippedSurrogate) -> None:
    if spec.ratio_clip is not None:
        raise _Unsupported(
            f"Tinker's clipped losses have no cap on the ratio itself (ratio_clip={spec.ratio_clip!r})"
        )


def _clipped(spec: ClippedSurrogate) -> TinkerLoss:
    _no_ratio_clip(spec)
    low, high = 1.0 - spec.clip_eps_low, 1.0 + spec.clip_eps_high
    if spec.level == "token":
        return TinkerLoss.ppo(
            clip_low=low, clip_high=high, normalization=_normalization(spec.length_normalize)
        )
    if not spec.length_normalize:
        raise _Unsupported(
            "Tinker's gspo clips the geometric mean of the token ratios; the sequence ratio without "
            "length_normalize is their product"
        )
    loss = TinkerLoss.gspo(clip_low=low, clip_high=high)
    loss.check_supported()
    return loss


def _cispo(spec: CISPO) -> TinkerLoss:
    return TinkerLoss.cispo(
        clip_low=1.0 - spec.clip_eps_low,
        clip_high=1.0 + spec.clip_eps_high,
        normalization=_normalization(spec.length_normalize),
    )


def _reinforce(spec: Reinforce) -> TinkerLoss:
    # Tinker's importance_sampling, -(exp(p - q)·A), has REINFORCE's gradient where q = p (on-policy).
    return TinkerLoss.importance_sampling(normalization=_normalization(spec.length_normalize))


def _truncated_is(spec: TruncatedIS) -> TinkerLoss:
    if isinstance(spec.inner, Reinforce) and spec.level == "token" and spec.cap is None:
        # -sg(r_t)·A·log π has the gradient of -r_t·A: exactly importance_sampling.
        return _reinforce(spec.inner)
    raise _Unsupported(
        "Tinker's importance_sampling is untruncated token-level IS around REINFORCE only "
        f"(this is level={spec.level!r}, cap={spec.cap!r} around {type(spec.inner).__name__})"
    )


_BUILTINS: dict[type[LossSpec], Callable[[Any], TinkerLoss]] = {
    ClippedSurrogate: _clipped,
    CISPO: _cispo,
    CrossEntropy: lambda spec: TinkerLoss.cross_entropy(normalization=_normalization(spec.length_normalize)),
    Reinforce: _reinforce,
    TruncatedIS: _truncated_is,
}

_NO_BUILTIN: dict[type[LossSpec], str] = {
    GMPO: "Tinker has no geometric-mean ratio clipped in log space",
    SAPO: "Tinker has no sigmoid-gated ratio",
    TokenKL: "Tinker's built-ins have no KL term to the sampler",
    Entropy: "Tinker's built-ins have no entropy term",
    ReverseKL: "Tinker's built-ins do not read teacher logprobs",
    Composite: "a weighted sum of loss terms is not one Tinker built-in",
}


def tinker_loss_for(algorithm: AlgorithmSpec | LossSpec) -> TinkerLoss:
    """The built-in Tinker loss that computes the same objective as an algorithm's loss spec.

    ``algorithm`` is a :class:`~ludic_core.algorithms.spec.AlgorithmSpec` (a ``ludic_core.algorithms``
    preset) or a loss spec. The mapping is
    by the spec's type and fields (the table in this module's docstring). Raises :class:`ConfigError`
    naming the spec and why when Tinker has no built-in equivalent: train those with :class:`CustomLoss`.
    """
    if not isinstance(algorithm, (AlgorithmSpec, LossSpec)):
        raise ConfigError(
            f"expected an AlgorithmSpec or a loss spec (ludic_core.algorithms), got {type(algorithm).__name__}"
        )
    loss = algorithm if isinstance(algorithm, LossSpec) else algorithm.loss
    build = _BUILTINS.get(type(loss))
    try:
        if build is None:
            raise _Unsupported(
                _NO_BUILTIN.get(type(loss), "ludic-tinker knows no Tinker loss for this spec type")
            )
        return build(loss)
    except _Unsupported as why:
        raise ConfigError(
            f"Tinker cannot run the loss spec {loss!r} with a built-in loss: {why}; train it with "
            'CustomLoss (forward_backward_custom, needs pip install "ludic-tinker[torch]") or pick a '
            "spec Tinker runs (ClippedSurrogate, CISPO, CrossEntropy, Reinforce)"
        ) from None
