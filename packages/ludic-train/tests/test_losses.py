"""Every loss and its gradient against an independent reference written here with plain per-token loops.

The references follow the original Ludic's loss formulas (with the changes listed in the docs'
algorithms page, docs/concepts/algorithms.md, "Differences from the original") token by token: ``log_softmax(logits[b, t])[input_ids[b, t+1]]`` for every ``t`` whose next token is an action,
nothing vectorised, no code shared with the implementation. Values and gradients (w.r.t. the logits)
are compared in float64 over several shapes, masks (prompt prefixes, multi-turn action segments, right
padding, sequences without actions) and advantages (positive, negative, zero).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from ludic_core.algorithms import LossSpec, Term
from ludic_core.errors import ConfigError, DataError
from ludic_train.losses import (
    CISPOLoss,
    CompositeLoss,
    EntropyBonus,
    GMPOLoss,
    MaskedCrossEntropyLoss,
    ReinforceLoss,
    ReverseKLLoss,
    SAPOLoss,
    SequenceClippedSurrogateLoss,
    TokenClippedSurrogateLoss,
    TokenKLLoss,
    TruncatedISCorrection,
    stats_to_host,
)
from ludic_train.losses.base import TokenLogpContext

# ---------------------------------------------------------------------------------------------------
# Random batches


def make_batch(
    batch_size: int, seq_len: int, vocab: int, *, seed: int, drift: float = 0.3
) -> dict[str, Tensor]:
    """Right-padded rows: a prompt, one or two action segments (a second turn after a tool/user
    segment), padding. ``actor_logps`` / ``teacher_logps`` are the true logprobs of random logits plus
    noise, so ratios sit around 1 with some outside every clip band."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    attention_mask = torch.zeros(batch_size, seq_len, dtype=torch.long)
    action_mask = torch.zeros(batch_size, seq_len)
    for b in range(batch_size):
        length = int(torch.randint(max(2, seq_len // 2), seq_len + 1, (1,), generator=g))
        attention_mask[b, :length] = 1
        if b == batch_size - 1 and batch_size > 2:
            continue  # one sequence with no action token at all
        prompt = int(torch.randint(1, max(2, length - 1), (1,), generator=g))
        action_mask[b, prompt:length] = 1.0
        if length - prompt >= 4 and b % 2 == 0:  # a second turn: a masked observation in between
            gap = prompt + (length - prompt) // 2
            action_mask[b, gap : gap + 1] = 0.0
    weight = torch.randn(batch_size, generator=g) * 1.5
    weight[0] = 0.0 if batch_size > 3 else weight[0]
    logits_seed = torch.randn(batch_size, seq_len, vocab, generator=g, dtype=torch.float64)
    reference_logps = torch.log_softmax(logits_seed, dim=-1)
    actor = torch.zeros(batch_size, seq_len)
    teacher = torch.zeros(batch_size, seq_len)
    for b in range(batch_size):
        for t in range(1, seq_len):
            if action_mask[b, t]:
                true = float(reference_logps[b, t - 1, input_ids[b, t]])
                actor[b, t] = true + drift * float(torch.randn((), generator=g))
                teacher[b, t] = true + 1.0 * float(torch.randn((), generator=g))
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "action_mask": action_mask,
        "weight": weight,
        "actor_logps": actor,
        "old_logp_action": actor.sum(1),
        "teacher_logps": teacher,
        "_logits": logits_seed,
    }


SHAPES = [(1, 4, 5), (3, 7, 11), (5, 12, 17), (8, 9, 6)]


def leaf_logits(batch: dict[str, Tensor]) -> Tensor:
    return batch["_logits"].clone().requires_grad_(True)


# ---------------------------------------------------------------------------------------------------
# Reference helpers: per-token loops


def action_positions(batch: dict[str, Tensor], b: int) -> list[int]:
    """Positions ``t`` on the logits grid whose *next* token is an action token."""
    mask = batch["action_mask"][b]
    return [t for t in range(mask.shape[0] - 1) if mask[t + 1] > 0]


def ref_token_logp(logits: Tensor, batch: dict[str, Tensor], b: int, t: int) -> Tensor:
    row = logits[b, t]
    return row[int(batch["input_ids"][b, t + 1])] - torch.logsumexp(row, dim=0)


def ref_sequence(
    logits: Tensor, batch: dict[str, Tensor], per_token: Callable[[int, int, Tensor], Tensor], normalize: bool
) -> list[Tensor]:
    out = []
    for b in range(logits.shape[0]):
        positions = action_positions(batch, b)
        total = logits.new_zeros(())
        for t in positions:
            total = total + per_token(b, t, ref_token_logp(logits, batch, b, t))
        out.append(total / max(1, len(positions)) if normalize else total)
    return out


def mean(values: list[Tensor]) -> Tensor:
    return torch.stack(values).mean()


def actor(batch: dict[str, Tensor], b: int, t: int) -> float:
    return float(batch["actor_logps"][b, t + 1])


def adv(batch: dict[str, Tensor], b: int) -> float:
    return float(batch["weight"][b])


def clip(x: Tensor, low: float, high: float) -> Tensor:
    return torch.clamp(x, low, high)


def ref_reinforce(logits: Tensor, batch: dict[str, Tensor], length_normalize: bool) -> Tensor:
    terms = ref_sequence(logits, batch, lambda b, t, lp: -adv(batch, b) * lp, length_normalize)
    return mean(terms)


def ref_token_clip(
    logits: Tensor, batch: dict[str, Tensor], lo: float, hi: float, norm: bool, cap: float | None
):
    def term(b: int, t: int, lp: Tensor) -> Tensor:
        r = torch.exp(lp - actor(batch, b, t))
        if cap is not None:
            r = torch.clamp(r, max=cap)
        a = adv(batch, b)
        return -torch.minimum(r * a, clip(r, 1 - lo, 1 + hi) * a)

    return mean(ref_sequence(logits, batch, term, norm))


def ref_gspo(
    logits: Tensor, batch: dict[str, Tensor], lo: float, hi: float, norm: bool, cap: float | None
) -> Tensor:
    out = []
    for b in range(logits.shape[0]):
        positions = action_positions(batch, b)
        logp = sum((ref_token_logp(logits, batch, b, t) for t in positions), logits.new_zeros(()))
        old = sum(actor(batch, b, t) for t in positions)
        if norm:
            logp, old = logp / max(1, len(positions)), old / max(1, len(positions))
        r = torch.exp(logp - old)
        if cap is not None:
            r = torch.clamp(r, max=cap)
        a = adv(batch, b)
        out.append(-torch.minimum(r * a, clip(r, 1 - lo, 1 + hi) * a))
    return mean(out)


def ref_gmpo(
    logits: Tensor, batch: dict[str, Tensor], lo: float, hi: float, norm: bool, cap: float | None
) -> Tensor:
    out = []
    for b in range(logits.shape[0]):
        a = adv(batch, b)
        s = (a > 0) - (a < 0)
        positions = action_positions(batch, b)
        total = logits.new_zeros(())
        for t in positions:
            ell = ref_token_logp(logits, batch, b, t) - actor(batch, b, t)
            total = total + s * torch.minimum(s * ell, clip(s * ell, -lo, hi))
        if norm:
            total = total / max(1, len(positions))
        g = torch.exp(total)
        if cap is not None:
            g = torch.clamp(g, max=cap)
        out.append(-g * a)
    return mean(out)


def ref_cispo(logits: Tensor, batch: dict[str, Tensor], lo: float, hi: float, norm: bool) -> Tensor:
    def term(b: int, t: int, lp: Tensor) -> Tensor:
        w = clip(torch.exp(lp.detach() - actor(batch, b, t)), 1 - lo, 1 + hi)
        return -w * adv(batch, b) * lp

    return mean(ref_sequence(logits, batch, term, norm))


def ref_sapo(logits: Tensor, batch: dict[str, Tensor], tau_pos: float, tau_neg: float, norm: bool) -> Tensor:
    def term(b: int, t: int, lp: Tensor) -> Tensor:
        a = adv(batch, b)
        tau = tau_pos if a > 0 else tau_neg
        r = torch.exp(lp - actor(batch, b, t))
        return -(4.0 / tau) * torch.sigmoid(tau * (r - 1.0)) * a

    return mean(ref_sequence(logits, batch, term, norm))


def ref_token_kl(logits: Tensor, batch: dict[str, Tensor], coeff: float, norm: bool) -> Tensor:
    return mean(ref_sequence(logits, batch, lambda b, t, lp: coeff * (lp - actor(batch, b, t)), norm))


def ref_entropy(logits: Tensor, batch: dict[str, Tensor], coeff: float, norm: bool) -> Tensor:
    out = []
    for b in range(logits.shape[0]):
        positions = action_positions(batch, b)
        total = logits.new_zeros(())
        for t in positions:
            p = torch.softmax(logits[b, t], dim=0)
            total = total - (p * torch.log(p)).sum()
        if norm:
            total = total / max(1, len(positions))
        out.append(-coeff * total)
    return mean(out)


def ref_sft(logits: Tensor, batch: dict[str, Tensor], norm: bool) -> Tensor:
    return mean(ref_sequence(logits, batch, lambda b, t, lp: -adv(batch, b) * lp, norm))


def ref_reverse_kl(
    logits: Tensor, batch: dict[str, Tensor], coeff: float, norm: bool
) -> tuple[Tensor, Tensor]:
    """(value, surrogate): the value is the reverse-KL estimate; the surrogate's gradient is the
    score-function gradient Σ (log π − log π_T) ∇ log π."""

    def teacher(b: int, t: int) -> float:
        return float(batch["teacher_logps"][b, t + 1])

    value = mean(ref_sequence(logits, batch, lambda b, t, lp: coeff * (lp.detach() - teacher(b, t)), norm))
    surrogate = mean(
        ref_sequence(logits, batch, lambda b, t, lp: coeff * float(lp.detach() - teacher(b, t)) * lp, norm)
    )
    return value, surrogate


def ref_tis_token_reinforce(logits: Tensor, batch: dict[str, Tensor], cap: float, norm: bool) -> Tensor:
    def term(b: int, t: int, lp: Tensor) -> Tensor:
        w = min(math.exp(float(lp.detach()) - actor(batch, b, t)), cap)
        return -w * adv(batch, b) * lp

    return mean(ref_sequence(logits, batch, term, norm))


def ref_tis_sequence(
    logits: Tensor, batch: dict[str, Tensor], inner: Callable[[int], Tensor], cap: float | None
) -> Tensor:
    out = []
    for b in range(logits.shape[0]):
        log_ratio = sum(
            float(ref_token_logp(logits, batch, b, t).detach()) - actor(batch, b, t)
            for t in action_positions(batch, b)
        )
        w = math.exp(log_ratio) if cap is None else min(math.exp(log_ratio), cap)
        out.append(w * inner(b))
    return mean(out)


def ref_tis_sequence_geomean(
    logits: Tensor, batch: dict[str, Tensor], inner: Callable[[int], Tensor], cap: float | None
) -> Tensor:
    """Length-normalised sequence ratio: exp of the mean token log-ratio over the action tokens."""
    out = []
    for b in range(logits.shape[0]):
        positions = action_positions(batch, b)
        total = 0.0
        for t in positions:
            total += float(ref_token_logp(logits, batch, b, t).detach()) - actor(batch, b, t)
        ratio = math.exp(total / len(positions)) if positions else 1.0
        w = ratio if cap is None else min(ratio, cap)
        out.append(w * inner(b))
    return mean(out)


# ---------------------------------------------------------------------------------------------------
# The comparison


def assert_matches(
    loss_fn: Callable[[Tensor, dict[str, Tensor]], tuple[Tensor, dict]], reference, batch
) -> None:
    logits = leaf_logits(batch)
    value, stats = loss_fn(logits, batch)
    value.backward()
    ref_logits = leaf_logits(batch)
    ref_value = reference(ref_logits, batch)
    ref_surrogate = ref_value
    if isinstance(ref_value, tuple):
        ref_value, ref_surrogate = ref_value
    ref_surrogate.backward()
    torch.testing.assert_close(value.detach(), ref_value.detach(), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(logits.grad, ref_logits.grad, rtol=1e-8, atol=1e-10)
    for name, stat in stats.items():
        assert stat.dim() == 0 and not stat.requires_grad, name


CASES: dict[str, tuple[object, Callable]] = {
    "reinforce": (ReinforceLoss(), lambda lg, b: ref_reinforce(lg, b, False)),
    "reinforce_lennorm": (ReinforceLoss(length_normalize=True), lambda lg, b: ref_reinforce(lg, b, True)),
    "grpo": (
        TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27),
        lambda lg, b: ref_token_clip(lg, b, 0.2, 0.27, False, None),
    ),
    "grpo_narrow_capped_lennorm": (
        TokenClippedSurrogateLoss(
            clip_eps_low=0.05, clip_eps_high=0.1, length_normalize=True, ratio_clip=1.3
        ),
        lambda lg, b: ref_token_clip(lg, b, 0.05, 0.1, True, 1.3),
    ),
    "gspo": (
        SequenceClippedSurrogateLoss(clip_eps_low=3e-4, clip_eps_high=4e-4, length_normalize=True),
        lambda lg, b: ref_gspo(lg, b, 3e-4, 4e-4, True, None),
    ),
    "gspo_sum_wide_capped": (
        SequenceClippedSurrogateLoss(clip_eps_low=0.3, clip_eps_high=0.5, ratio_clip=1.4),
        lambda lg, b: ref_gspo(lg, b, 0.3, 0.5, False, 1.4),
    ),
    "gmpo": (GMPOLoss(), lambda lg, b: ref_gmpo(lg, b, 0.4, 0.4, True, None)),
    "gmpo_asym_sum_capped": (
        GMPOLoss(clip_eps_low=0.1, clip_eps_high=0.3, length_normalize=False, ratio_clip=1.2),
        lambda lg, b: ref_gmpo(lg, b, 0.1, 0.3, False, 1.2),
    ),
    "cispo": (CISPOLoss(), lambda lg, b: ref_cispo(lg, b, 1e6, 0.2, True)),
    "cispo_both_clips_sum": (
        CISPOLoss(clip_eps_low=0.1, clip_eps_high=0.1, length_normalize=False),
        lambda lg, b: ref_cispo(lg, b, 0.1, 0.1, False),
    ),
    "sapo": (SAPOLoss(), lambda lg, b: ref_sapo(lg, b, 1.0, 1.05, False)),
    "sapo_lennorm": (
        SAPOLoss(tau_pos=2.0, tau_neg=3.0, length_normalize=True),
        lambda lg, b: ref_sapo(lg, b, 2.0, 3.0, True),
    ),
    "token_kl": (TokenKLLoss(coeff=0.3), lambda lg, b: ref_token_kl(lg, b, 0.3, True)),
    "entropy": (EntropyBonus(coeff=0.05), lambda lg, b: ref_entropy(lg, b, 0.05, True)),
    "entropy_sum": (
        EntropyBonus(coeff=0.05, length_normalize=False),
        lambda lg, b: ref_entropy(lg, b, 0.05, False),
    ),
    "sft": (MaskedCrossEntropyLoss(), lambda lg, b: ref_sft(lg, b, True)),
    "sft_sum": (MaskedCrossEntropyLoss(length_normalize=False), lambda lg, b: ref_sft(lg, b, False)),
    "reverse_kl": (ReverseKLLoss(coeff=0.7), lambda lg, b: ref_reverse_kl(lg, b, 0.7, True)),
    "tis_token_reinforce": (
        TruncatedISCorrection(ReinforceLoss(), level="token", cap=1.5),
        lambda lg, b: ref_tis_token_reinforce(lg, b, 1.5, False),
    ),
    "tis_sequence_reinforce_uncapped": (
        TruncatedISCorrection(ReinforceLoss(length_normalize=True), level="sequence", cap=None),
        lambda lg, batch: ref_tis_sequence(
            lg,
            batch,
            lambda i: ref_sequence(lg, batch, lambda b, t, lp: -adv(batch, b) * lp, True)[i],
            None,
        ),
    ),
    # The original Ludic's ReinforceLoss(length_normalize=True): −sg(exp(mean_t log r_t))·A·mean_t log π.
    "tis_geomean_reinforce_lennorm_uncapped": (
        TruncatedISCorrection(ReinforceLoss(length_normalize=True), level="sequence_geomean", cap=None),
        lambda lg, batch: ref_tis_sequence_geomean(
            lg,
            batch,
            lambda i: ref_sequence(lg, batch, lambda b, t, lp: -adv(batch, b) * lp, True)[i],
            None,
        ),
    ),
    "tis_geomean_reinforce_sum_capped": (
        TruncatedISCorrection(ReinforceLoss(), level="sequence_geomean", cap=1.05),
        lambda lg, batch: ref_tis_sequence_geomean(
            lg,
            batch,
            lambda i: ref_sequence(lg, batch, lambda b, t, lp: -adv(batch, b) * lp, False)[i],
            1.05,
        ),
    ),
    "tis_sequence_gmpo": (
        TruncatedISCorrection(GMPOLoss(), level="sequence", cap=1.2),
        lambda lg, b: ref_tis_sequence(
            lg,
            b,
            lambda i: _gmpo_term(lg, b, i),
            1.2,
        ),
    ),
    "composite_cispo_kl_entropy": (
        CompositeLoss(
            [
                Term("cispo", CISPOLoss()),
                Term("kl", TokenKLLoss(coeff=0.1)),
                Term("entropy", EntropyBonus(coeff=0.01), weight=2.0),
            ]
        ),
        lambda lg, b: (
            ref_cispo(lg, b, 1e6, 0.2, True)
            + ref_token_kl(lg, b, 0.1, True)
            + 2.0 * ref_entropy(lg, b, 0.01, True)
        ),
    ),
}


def _gmpo_term(logits: Tensor, batch: dict[str, Tensor], b: int) -> Tensor:
    """Sequence ``b``'s GMPO term (mean over a one-row view is the term itself)."""
    one = {k: v[b : b + 1] for k, v in batch.items()}
    return ref_gmpo(logits[b : b + 1], one, 0.4, 0.4, True, None)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradient_match_reference(case: str, shape: tuple[int, int, int]) -> None:
    loss, reference = CASES[case]
    for seed in (0, 1):
        batch = make_batch(*shape, seed=seed + 10 * shape[0])
        assert_matches(loss.compute, reference, batch)


def test_clip_bands_are_exercised_by_the_random_batches() -> None:
    """The references would not test clipping if no ratio left the band; make sure some do."""
    batch = make_batch(8, 12, 17, seed=3)
    _, stats = CASES["tis_geomean_reinforce_sum_capped"][0].compute(batch["_logits"], batch)  # type: ignore[attr-defined]
    assert 0.05 < stats_to_host(stats)["tis/capped_frac"] < 0.95
    _, stats = TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(
        batch["_logits"], batch
    )
    host = stats_to_host(stats)
    assert 0.05 < host["clip_frac"] < 0.95
    _, stats = GMPOLoss(clip_eps_low=0.1, clip_eps_high=0.1).compute(batch["_logits"], batch)
    assert 0.05 < stats_to_host(stats)["clip_frac"] < 0.95


# ---------------------------------------------------------------------------------------------------
# Alignment


def _alignment_batch() -> dict[str, Tensor]:
    # tokens:      p0 p1 a2 a3 o4 a5 pad
    # action_mask:  0  0  1  1  0  1  0
    # logits at t score token t+1, so positions 1, 2 and 4 carry the action tokens' logprobs.
    g = torch.Generator().manual_seed(0)
    return {
        "input_ids": torch.tensor([[3, 1, 4, 1, 5, 2, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 0]]),
        "action_mask": torch.tensor([[0, 0, 1, 1, 0, 1, 0]], dtype=torch.float32),
        "weight": torch.tensor([1.5]),
        "actor_logps": torch.tensor([[0, 0, -1.0, -1.2, 0, -0.8, 0]]),
        "teacher_logps": torch.tensor([[0, 0, -0.5, -2.0, 0, -1.0, 0]]),
        "_logits": torch.randn(1, 7, 6, generator=g, dtype=torch.float64),
    }


SCORED_POSITIONS = [1, 2, 4]


def test_token_logp_applies_the_causal_shift() -> None:
    batch = _alignment_batch()
    logits = batch["_logits"]
    ctx = TokenLogpContext(logits, batch)
    expected = torch.zeros(1, 6, dtype=torch.float64)
    for t in SCORED_POSITIONS:
        expected[0, t] = torch.log_softmax(logits[0, t], dim=-1)[batch["input_ids"][0, t + 1]]
    torch.testing.assert_close(ctx.token_logp, expected)
    assert ctx.mask.tolist() == [[0, 1, 1, 0, 1, 0]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_reaches_exactly_the_positions_that_predict_actions(case: str) -> None:
    loss, _ = CASES[case]
    batch = _alignment_batch()
    logits = leaf_logits(batch)
    value, _ = loss.compute(logits, batch)
    value.backward()
    touched = [t for t in range(7) if logits.grad[0, t].abs().max() > 0]
    assert touched == SCORED_POSITIONS


def test_entropy_bonus_uses_the_shifted_mask() -> None:
    """Entropy is taken at the positions that predict action tokens: the last prompt token's
    distribution is included, the distribution after the final action token is not."""
    batch = _alignment_batch()
    logits = batch["_logits"]
    loss, stats = EntropyBonus(coeff=1.0).compute(logits, batch)

    def entropy(t: int) -> float:
        p = torch.softmax(logits[0, t], dim=-1)
        return float(-(p * p.log()).sum())

    expected = sum(entropy(t) for t in SCORED_POSITIONS) / 3
    unshifted = sum(entropy(t) for t in (2, 3, 5)) / 3  # the original's off-by-one
    assert float(loss.detach()) == pytest.approx(-expected, rel=1e-9)
    assert float(stats["entropy_mean"]) == pytest.approx(expected, rel=1e-9)
    assert abs(expected - unshifted) > 1e-3


def test_half_precision_logits_are_scored_in_float32() -> None:
    batch = _alignment_batch()
    logits16 = batch["_logits"].to(torch.bfloat16)
    ctx = TokenLogpContext(logits16, batch)
    reference = TokenLogpContext(logits16.to(torch.float64), batch).token_logp
    assert ctx.token_logp.dtype == torch.float32
    torch.testing.assert_close(ctx.token_logp.double(), reference, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------------
# Specific behaviours


def test_on_policy_grpo_equals_reinforce_gradient() -> None:
    """At r = 1 the clipped surrogate's gradient is the REINFORCE gradient."""
    batch = make_batch(4, 8, 7, seed=5)
    with torch.no_grad():
        ctx = TokenLogpContext(batch["_logits"], batch)
        on_policy = torch.zeros_like(batch["actor_logps"], dtype=torch.float64)
        on_policy[:, 1:] = ctx.token_logp
    batch["actor_logps"] = on_policy
    grads = []
    for loss in (TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27), ReinforceLoss()):
        logits = leaf_logits(batch)
        loss.compute(logits, batch)[0].backward()
        grads.append(logits.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_composite_shares_one_log_softmax(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    original = torch.logsumexp

    def counting(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    batch = make_batch(3, 7, 11, seed=1)
    composite = CompositeLoss([Term("a", CISPOLoss()), Term("b", TokenKLLoss()), Term("c", SAPOLoss())])
    monkeypatch.setattr(torch, "logsumexp", counting)
    composite.compute(batch["_logits"], batch)
    assert calls["n"] == 1


def test_composite_stats_are_prefixed() -> None:
    batch = make_batch(3, 7, 11, seed=1)
    composite = CompositeLoss([Term("pg", CISPOLoss()), Term("kl", TokenKLLoss(), weight=0.5)])
    loss, stats = composite.compute(batch["_logits"], batch)
    host = stats_to_host(stats)
    assert (
        host["loss"] == pytest.approx(float(loss)) == pytest.approx(host["pg/loss"] + 0.5 * host["kl/loss"])
    )
    assert host["kl/weight"] == 0.5
    assert {"pg/clip_frac", "kl/kl_mean"} <= host.keys()
    assert composite.required_inputs == {"actor_logps"}


def test_missing_inputs_raise_a_data_error_naming_the_key() -> None:
    batch = make_batch(2, 6, 5, seed=0)
    del batch["actor_logps"]
    with pytest.raises(DataError, match=r"TokenClippedSurrogateLoss needs batch\['actor_logps'\]"):
        TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(batch["_logits"], batch)
    ReinforceLoss().compute(batch["_logits"], batch)  # plain REINFORCE needs no behaviour logprobs
    del batch["teacher_logps"]
    with pytest.raises(DataError, match="teacher_logps"):
        ReverseKLLoss().compute(batch["_logits"], batch)


def test_shape_errors_name_the_shapes() -> None:
    batch = make_batch(2, 6, 5, seed=0)
    with pytest.raises(DataError, match=r"logits shape \(2, 5, 5\)"):
        ReinforceLoss().compute(batch["_logits"][:, :5], batch)
    batch["actor_logps"] = batch["actor_logps"][:, :4]
    with pytest.raises(DataError, match="actor_logps"):
        CISPOLoss().compute(batch["_logits"], batch)


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: TokenClippedSurrogateLoss(clip_eps_low=0.0, clip_eps_high=0.2), "clip_eps_low"),
        (lambda: GMPOLoss(ratio_clip=-1.0), "ratio_clip"),
        (lambda: SAPOLoss(tau_neg=0.0), "tau_neg"),
        (lambda: TruncatedISCorrection(GMPOLoss(), level="token"), "level='sequence'"),
        (lambda: TruncatedISCorrection(ReinforceLoss(), cap=0.0), "cap"),
        (
            lambda: TruncatedISCorrection(ReinforceLoss(), level="sequence_mean"),  # type: ignore[arg-type]
            r"level must be one of 'token', 'sequence', 'sequence_geomean', got 'sequence_mean'",
        ),
        (lambda: CompositeLoss([]), "empty"),
        (lambda: CompositeLoss([Term("a", CISPOLoss()), Term("a", SAPOLoss())]), "repeated"),
        (lambda: Term("a/b", CISPOLoss()), "name"),
    ],
)
def test_bad_configuration_is_rejected(factory: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        factory()


def test_stats_to_host_returns_python_floats_in_one_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = make_batch(3, 7, 11, seed=2)
    _, stats = TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(
        batch["_logits"], batch
    )
    calls = {"n": 0}
    original = torch.Tensor.tolist

    def counting(self: Tensor):
        calls["n"] += 1
        return original(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    host = stats_to_host(stats)
    assert calls["n"] == 1
    assert set(host) == set(stats)
    assert all(isinstance(v, float) for v in host.values())
    assert host["loss"] == pytest.approx(float(stats["loss"]))
    assert stats_to_host({}) == {}


class _MeanLogpLoss(LossSpec):
    """A third-party loss spec that computes itself through ``token_context`` (no ``SequenceLoss``)."""

    def compute(self, logits: Tensor, batch) -> tuple[Tensor, dict[str, Tensor]]:
        from ludic_train.losses import token_context

        ctx = token_context(logits, batch)
        per_sequence = -ctx.sequence_logp(length_normalize=True)
        return per_sequence.mean(), {"custom": per_sequence.mean().detach()}


def test_composite_accepts_compute_only_losses_and_shares_the_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = make_batch(3, 7, 11, seed=4)
    composite = CompositeLoss([Term("pg", CISPOLoss()), Term("mine", _MeanLogpLoss(), weight=0.5)])
    calls = {"n": 0}
    original = torch.logsumexp

    def counting(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "logsumexp", counting)
    logits = leaf_logits(batch)
    loss, stats = composite.compute(logits, batch)
    assert calls["n"] == 1
    expected = ref_cispo(batch["_logits"], batch, 1e6, 0.2, True) + 0.5 * ref_sft(
        batch["_logits"], {**batch, "weight": torch.ones(3)}, True
    )
    torch.testing.assert_close(loss.detach(), expected)
    assert "mine/custom" in stats
    with pytest.raises(ConfigError, match="only implement compute"):
        TruncatedISCorrection(composite, level="sequence").compute(logits, batch)


# ---------------------------------------------------------------------------------------------------
# Temperature and logits at some positions only


def _positions(batch: dict[str, Tensor]) -> Tensor:
    mask = batch["action_mask"]
    return (mask[:, 1:] > 0).any(dim=0).nonzero().squeeze(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_at_the_action_positions_give_the_same_loss_and_gradient(case: str) -> None:
    """What a model returns for ``logits_to_keep=logit_positions`` scores exactly like the full logits."""
    loss, _ = CASES[case]
    for seed, shape in enumerate(SHAPES):
        batch = make_batch(*shape, seed=seed)
        batch["temperature"] = torch.rand(shape[0], generator=torch.Generator().manual_seed(seed)) + 0.5
        full = leaf_logits(batch)
        value, stats = loss.compute(full, batch)
        value.backward()
        positions = _positions(batch)
        kept = full.detach()[:, positions].clone().requires_grad_(True)
        kept_value, kept_stats = loss.compute(kept, {**batch, "logit_positions": positions})
        kept_value.backward()
        # The same rows in the same order go through the same operations: equal to the last bit.
        assert torch.equal(kept_value.detach(), value.detach()), case
        assert torch.equal(kept.grad, full.grad[:, positions]), case
        assert full.grad[:, [t for t in range(shape[1]) if t not in positions.tolist()]].abs().max() == 0
        assert stats_to_host(kept_stats) == stats_to_host(stats)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_row_is_scored_at_its_temperature(case: str) -> None:
    """A row at temperature τ scores ``softmax(logits / τ)``: the loss equals the untempered loss on
    logits divided row by row, value and gradient (chain rule: the gradient is divided by τ too)."""
    loss, _ = CASES[case]
    batch = make_batch(5, 12, 17, seed=21)
    temperature = torch.tensor([0.7, 1.0, 0.3, 1.6, 0.7])
    tempered = leaf_logits(batch)
    value, _ = loss.compute(tempered, {**batch, "temperature": temperature})
    value.backward()
    divided = leaf_logits(batch)
    reference, _ = loss.compute(divided / temperature.double()[:, None, None], batch)
    reference.backward()
    torch.testing.assert_close(value.detach(), reference.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tempered.grad, divided.grad, rtol=1e-12, atol=1e-12)


def test_on_policy_ratios_are_one_at_any_temperature() -> None:
    batch = make_batch(4, 10, 13, seed=8)
    temperature = torch.tensor([0.7, 0.7, 1.0, 0.4])
    logits = batch["_logits"]
    tempered = torch.log_softmax(logits / temperature.double()[:, None, None], dim=-1)
    on_policy = torch.zeros(4, 10)
    on_policy[:, 1:] = tempered[:, :-1].gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    on_policy *= batch["action_mask"]
    batch = {**batch, "actor_logps": on_policy, "temperature": temperature}
    host = stats_to_host(
        TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(logits, batch)[1]
    )
    assert host["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert host["clip_frac"] == 0.0
    untempered = stats_to_host(
        TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27).compute(
            logits, {**batch, "temperature": None}
        )[1]
    )
    assert abs(untempered["ratio_mean"] - 1.0) > 0.05  # without the temperature the ratios are off


def test_bad_positions_and_temperatures_are_data_errors() -> None:
    batch = make_batch(3, 7, 11, seed=1)
    logits = batch["_logits"]
    positions = _positions(batch)
    with pytest.raises(DataError, match=r"logits shape .*nor \[B, K, V\].* absent"):
        ReinforceLoss().compute(logits[:, positions], batch)
    with pytest.raises(DataError, match=r"has 3 positions"):
        ReinforceLoss().compute(logits[:, :2], {**batch, "logit_positions": torch.tensor([0, 1, 2])})
    missing = positions[1:]
    with pytest.raises(DataError, match="include every position whose next token is an action token"):
        ReinforceLoss().compute(logits[:, missing], {**batch, "logit_positions": missing})
    backwards = positions.flip(0)
    with pytest.raises(DataError, match="strictly increasing"):
        ReinforceLoss().compute(logits[:, backwards], {**batch, "logit_positions": backwards})
    with pytest.raises(DataError, match="1-D long tensor"):
        ReinforceLoss().compute(logits[:, positions], {**batch, "logit_positions": positions.float()})
    # Full logits are scored as they are: third-party callers need not know about positions.
    ReinforceLoss().compute(logits, {**batch, "logit_positions": missing})
    with pytest.raises(DataError, match=r"batch\['temperature'\] has shape \(2,\)"):
        ReinforceLoss().compute(logits, {**batch, "temperature": torch.ones(2)})
