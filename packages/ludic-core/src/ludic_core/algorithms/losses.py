"""Loss specs: what an algorithm optimises, as frozen values with no tensors in them.

A spec names a loss and holds its hyper-parameters; ludic-train builds its torch loss from it
(``ludic_train.algorithm.build_loss``) and ludic-tinker picks the Tinker loss with the same objective
(``ludic_tinker.losses.tinker_loss_for``), both by the spec's type. The formulas are in ludic-train's
torch losses. Shared fields: ``length_normalize`` (divide each sequence's summed per-token term by its
action-token count; the loss is a mean over sequences); ``clip_eps_low`` / ``clip_eps_high`` (the ratio
band ``[1 − low, 1 + high]``, in log space for :class:`GMPO`) and ``ratio_clip`` (a cap on the ratio);
``required_inputs`` (the optional SAW item fields the loss reads, from
:data:`~ludic_core.algorithms.spec.KNOWN_INPUTS`); ``token_decomposable`` (a reduction of per-token
terms, which :class:`TruncatedIS` at token level needs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import attrs

from ludic_core.errors import ConfigError
from ludic_core.validation import boolean, finite_number, one_of, positive_number

__all__ = [
    "CISPO",
    "GMPO",
    "SAPO",
    "ClippedSurrogate",
    "Composite",
    "CrossEntropy",
    "Entropy",
    "LossSpec",
    "Reinforce",
    "ReverseKL",
    "SurrogateLevel",
    "TISLevel",
    "Term",
    "TokenKL",
    "TruncatedIS",
]

SurrogateLevel = Literal["token", "sequence"]
TISLevel = Literal["token", "sequence", "sequence_geomean"]

ACTOR_LOGPS = frozenset({"actor_logps"})
TEACHER_LOGPS = frozenset({"teacher_logps"})


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # Infinity is allowed: an unbounded side of a band (CISPO's default lower clip is 1e6 for the same).
    if not (_is_number(value) and value > 0):  # type: ignore[operator]
        raise ConfigError(f"{type(instance).__name__}.{attribute.name} must be a number > 0, got {value!r}")


def _positive_or_none(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _positive(instance, attribute, value)


class LossSpec:
    """Base of every loss spec. A backend maps each concrete spec type to its own loss."""

    @property
    def token_decomposable(self) -> bool:
        """Whether the loss is a reduction of per-token terms (token-level :class:`TruncatedIS` needs it)."""
        return True

    @property
    def required_inputs(self) -> frozenset[str]:
        """The optional SAW item fields this loss reads."""
        return frozenset()

    @property
    def reads_weights(self) -> bool:
        """Whether the item weights (the credit) enter the loss; a KL or distillation term ignores them."""
        return True


@attrs.frozen(kw_only=True)
class ClippedSurrogate(LossSpec):
    """PPO's clipped surrogate ``−min(r A, clip(r, 1−ε_lo, 1+ε_hi) A)``.

    ``level="token"`` (GRPO): one ratio per token. ``level="sequence"`` (GSPO): one ratio per sequence,
    ``exp(log π(a_b) − log μ(a_b))``, the geometric mean of the token ratios when ``length_normalize``.
    The band has no default: GRPO's and GSPO's differ by three orders of magnitude.
    """

    level: SurrogateLevel = attrs.field(validator=one_of("token", "sequence"))
    clip_eps_low: float = attrs.field(validator=_positive)
    clip_eps_high: float = attrs.field(validator=_positive)
    length_normalize: bool = attrs.field(default=False, validator=boolean())
    ratio_clip: float | None = attrs.field(default=None, validator=_positive_or_none)

    @property
    def token_decomposable(self) -> bool:
        return self.level == "token"

    @property
    def required_inputs(self) -> frozenset[str]:
        return ACTOR_LOGPS


@attrs.frozen(kw_only=True)
class CISPO(LossSpec):
    """``−sg(clip(r_t, 1−ε_lo, 1+ε_hi)) · A · log π(a_t)``; ε_lo = 1e6 means no lower clip."""

    clip_eps_low: float = attrs.field(default=1e6, validator=_positive)
    clip_eps_high: float = attrs.field(default=0.2, validator=_positive)
    length_normalize: bool = attrs.field(default=True, validator=boolean())

    @property
    def required_inputs(self) -> frozenset[str]:
        return ACTOR_LOGPS


@attrs.frozen(kw_only=True)
class GMPO(LossSpec):
    """Geometric-mean ratio of the token ratios clipped in log space to ``[−ε_lo, ε_hi]``, times ``A``."""

    clip_eps_low: float = attrs.field(default=0.4, validator=_positive)
    clip_eps_high: float = attrs.field(default=0.4, validator=_positive)
    length_normalize: bool = attrs.field(default=True, validator=boolean())
    ratio_clip: float | None = attrs.field(default=None, validator=_positive_or_none)

    @property
    def token_decomposable(self) -> bool:
        return False

    @property
    def required_inputs(self) -> frozenset[str]:
        return ACTOR_LOGPS


@attrs.frozen(kw_only=True)
class SAPO(LossSpec):
    """A sigmoid gate ``(4/τ) σ(τ (r − 1))`` on the token ratio, ``τ = tau_pos`` when ``A > 0`` else ``tau_neg``."""

    tau_pos: float = attrs.field(default=1.0, validator=_positive)
    tau_neg: float = attrs.field(default=1.05, validator=_positive)
    length_normalize: bool = attrs.field(default=False, validator=boolean())

    @property
    def required_inputs(self) -> frozenset[str]:
        return ACTOR_LOGPS


@attrs.frozen(kw_only=True)
class Reinforce(LossSpec):
    """``−A · log π(a_t)``: no behaviour logprobs. Off-policy correction is :class:`TruncatedIS` around it."""

    length_normalize: bool = attrs.field(default=False, validator=boolean())


@attrs.frozen(kw_only=True)
class _KLPenalty(LossSpec):
    """``coeff`` times a per-token KL estimate to a reference policy whose logprobs each item carries;
    the credit does not enter it. A subclass names the reference (its ``required_inputs``)."""

    coeff: float = attrs.field(default=1.0, validator=finite_number())
    length_normalize: bool = attrs.field(default=True, validator=boolean())

    @property
    def reads_weights(self) -> bool:
        return False


@attrs.frozen(kw_only=True)
class TokenKL(_KLPenalty):
    """``coeff · (log π(a_t) − log μ(a_t))``: the k1 KL estimate to the behaviour policy."""

    @property
    def required_inputs(self) -> frozenset[str]:
        return ACTOR_LOGPS


@attrs.frozen(kw_only=True)
class Entropy(LossSpec):
    """The entropy bonus ``−coeff · H_t`` at each action position."""

    coeff: float = attrs.field(default=0.01, validator=finite_number())
    length_normalize: bool = attrs.field(default=True, validator=boolean())

    @property
    def reads_weights(self) -> bool:
        return False


@attrs.frozen(kw_only=True)
class CrossEntropy(LossSpec):
    """Weighted masked cross-entropy ``−w · log π(a_t)`` on the action tokens (SFT)."""

    length_normalize: bool = attrs.field(default=True, validator=boolean())


@attrs.frozen(kw_only=True)
class ReverseKL(_KLPenalty):
    """On-policy distillation: per-token ``coeff · KL(π ‖ π_teacher)`` with the score-function gradient."""

    @property
    def required_inputs(self) -> frozenset[str]:
        return TEACHER_LOGPS


def _spec(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, LossSpec):
        raise ConfigError(
            f"{type(instance).__name__}.{attribute.name} must be a LossSpec, got {type(value).__name__}"
        )


@attrs.frozen
class Term:
    """One weighted term of a :class:`Composite`; ``name`` prefixes its stats (``"{name}/loss"``)."""

    name: str
    loss: LossSpec = attrs.field(validator=_spec)
    weight: float = attrs.field(default=1.0, validator=finite_number())

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigError(f"Term.name must be a non-empty str without '/', got {self.name!r}")


def _terms(values: Iterable[Term]) -> tuple[Term, ...]:
    return tuple(values)


@attrs.frozen
class Composite(LossSpec):
    """``Σ_i weight_i · L_i`` over uniquely named terms, from one forward pass."""

    terms: tuple[Term, ...] = attrs.field(converter=_terms)

    def __attrs_post_init__(self) -> None:
        if not self.terms:
            raise ConfigError("Composite.terms must not be empty")
        wrong = [type(t).__name__ for t in self.terms if not isinstance(t, Term)]
        if wrong:
            raise ConfigError(f"Composite.terms must be Term values, got {wrong}")
        names = [t.name for t in self.terms]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigError(f"Composite.terms names must be unique; repeated: {repeated}")

    @property
    def token_decomposable(self) -> bool:
        return False

    @property
    def required_inputs(self) -> frozenset[str]:
        return frozenset().union(*(term.loss.required_inputs for term in self.terms))

    @property
    def reads_weights(self) -> bool:
        return any(term.loss.reads_weights for term in self.terms)


@attrs.frozen
class TruncatedIS(LossSpec):
    """``inner`` reweighted by ``sg(min(π/μ, cap))``, the truncated importance ratio to the sampler.

    ``level="token"`` weights each token term (``inner`` must be token-decomposable: all but
    sequence-level :class:`ClippedSurrogate`, :class:`GMPO`, :class:`Composite` and another
    :class:`TruncatedIS`); ``"sequence"`` each sequence term by the product of the token ratios,
    ``"sequence_geomean"`` by their geometric mean. ``cap=None`` does not truncate.
    """

    inner: LossSpec = attrs.field(validator=_spec)
    level: TISLevel = attrs.field(default="token", validator=one_of("token", "sequence", "sequence_geomean"))
    cap: float | None = attrs.field(default=2.0, validator=positive_number(optional=True))

    def __attrs_post_init__(self) -> None:
        if self.level == "token" and not self.inner.token_decomposable:
            raise ConfigError(
                f"TruncatedIS.level='token' needs per-token loss terms, and {type(self.inner).__name__} "
                "is sequence-level; use level='sequence'"
            )

    @property
    def token_decomposable(self) -> bool:
        return False

    @property
    def required_inputs(self) -> frozenset[str]:
        return self.inner.required_inputs | ACTOR_LOGPS

    @property
    def reads_weights(self) -> bool:
        return self.inner.reads_weights
