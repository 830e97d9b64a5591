"""The fused action-row gather computes exactly what the boolean-mask path computed.

``TokenLogpContext`` reads the action rows of the logits by integer index and writes per-token values
back with ``index_copy``. The reference below is the former implementation, kept here verbatim in
spirit: select the rows with the boolean action mask, take ``x[target] − logsumexp(x)`` (or the entropy)
on them, and scatter the values back through the mask. Both run on the same logits of ragged collated
batches (different prompt and completion lengths, multi-turn items with several action spans, per-item
temperatures, right padding), with full ``[B, T, V]`` logits and with logits at ``logit_positions``, in
float32, float64 and bfloat16; values must be bit-identical and gradients equal, for the context itself
and for every loss computed on it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
import torch
from torch import Tensor

from ludic_core.algorithms import Term
from ludic_core.saw import SAWItem
from ludic_train.collate import collate_saw_items
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
)
from ludic_train.losses.base import SequenceLoss, TokenLogpContext

VOCAB = 23


class MaskedContext(TokenLogpContext):
    """The boolean-mask selection and scatter the context used before the fused gather."""

    def _masked_rows(self) -> Tensor:
        if self.positions is None:
            rows = self.logits[:, :-1][self.mask_bool]
        else:
            rows = self.logits[self.mask_bool[:, self.positions]]
        rows = rows.to(self.dtype)
        if self.temperature is None:
            return rows
        per_row = self.temperature.to(self.dtype)[:, None].expand(self.mask_bool.shape)[self.mask_bool]
        return rows / per_row[:, None]

    def _masked_scatter(self, values: Tensor) -> Tensor:
        out = torch.zeros(self.mask.shape, dtype=values.dtype, device=values.device)
        out[self.mask_bool] = values
        return out

    @property
    def token_logp(self) -> Tensor:
        if self._token_logp is None:
            with torch.enable_grad():
                rows = self._masked_rows()
                chosen = self.targets[self.mask_bool].unsqueeze(-1)
                values = rows.gather(-1, chosen).squeeze(-1) - torch.logsumexp(rows, dim=-1)
                self._token_logp = self._masked_scatter(values)
        return self._token_logp

    @property
    def entropy(self) -> Tensor:
        if self._entropy is None:
            with torch.enable_grad():
                logp = torch.log_softmax(self._masked_rows(), dim=-1)
                self._entropy = self._masked_scatter(-(logp.exp() * logp).sum(dim=-1))
        return self._entropy


def ragged_items(seed: int, n: int = 7) -> list[SAWItem]:
    """Items of different lengths: a prompt, then 1–3 turns (action span, then an observation span)."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        mask = [0] * rng.randint(1, 9)
        for _ in range(rng.randint(1, 3)):
            mask += [1] * rng.randint(1, 6)
            mask += [0] * rng.randint(0, 4)  # 0: the next turn's span is adjacent (one long span)
        actions = sum(mask)
        items.append(
            SAWItem(
                input_ids=[rng.randrange(VOCAB) for _ in mask],
                action_mask=mask,
                weight=rng.uniform(-1.5, 1.5),
                meta={"rollout_id": f"r{i}"},
                actor_logps=[rng.uniform(-4.0, -0.5) for _ in range(actions)],
                teacher_logps=[rng.uniform(-4.0, -0.5) for _ in range(actions)],
                sampling_temperature=rng.choice([None, 0.0, 0.7, 1.3]),
            )
        )
    return items


def logits_for(batch: Mapping[str, Tensor], *, kept: bool, dtype: torch.dtype, seed: int) -> Tensor:
    batch_size, length = batch["input_ids"].shape
    width = batch["logit_positions"].shape[0] if kept else length
    g = torch.Generator().manual_seed(seed)
    return (2.0 * torch.randn(batch_size, width, VOCAB, generator=g, dtype=torch.float64)).to(dtype)


CASES = [
    pytest.param(seed, kept, dtype, id=f"seed{seed}-{'kept' if kept else 'full'}-{str(dtype)[6:]}")
    for seed in (0, 1, 2)
    for kept in (False, True)
    for dtype in (torch.float32, torch.float64, torch.bfloat16)
]


def grad_of(make: type[TokenLogpContext], logits: Tensor, batch: Mapping[str, Tensor], read) -> Tensor:
    leaf = logits.clone().requires_grad_(True)
    read(make(leaf, batch)).backward()
    assert leaf.grad is not None
    return leaf.grad


@pytest.mark.parametrize(("seed", "kept", "dtype"), CASES)
def test_token_logp_and_entropy_match_the_masked_path(seed: int, kept: bool, dtype: torch.dtype) -> None:
    batch = collate_saw_items(ragged_items(seed), pad_token_id=0)
    logits = logits_for(batch, kept=kept, dtype=dtype, seed=seed)
    fused, masked = TokenLogpContext(logits, batch), MaskedContext(logits, batch)
    assert (fused.positions is None) == (not kept)
    assert torch.equal(fused.token_logp, masked.token_logp)
    assert torch.equal(fused.entropy, masked.entropy)
    # Off the action positions both are exactly 0; on them token logprobs are negative.
    assert torch.all(fused.token_logp[~fused.mask_bool] == 0)
    assert torch.all(fused.token_logp[fused.mask_bool] < 0)

    g = torch.Generator().manual_seed(seed + 100)
    weights = torch.randn(fused.mask.shape, generator=g, dtype=fused.dtype)

    def logp_objective(ctx: TokenLogpContext) -> Tensor:
        return (ctx.token_logp * weights).sum()

    def entropy_objective(ctx: TokenLogpContext) -> Tensor:
        return (ctx.entropy * weights).sum()

    for objective in (logp_objective, entropy_objective):
        torch.testing.assert_close(
            grad_of(TokenLogpContext, logits, batch, objective),
            grad_of(MaskedContext, logits, batch, objective),
            rtol=0,
            atol=0,
        )


LOSSES: dict[str, SequenceLoss] = {
    "reinforce": ReinforceLoss(),
    "grpo": TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27),
    "gspo": SequenceClippedSurrogateLoss(clip_eps_low=3e-4, clip_eps_high=4e-4, length_normalize=True),
    "gmpo": GMPOLoss(),
    "cispo": CISPOLoss(),
    "sapo": SAPOLoss(),
    "kl": TokenKLLoss(),
    "entropy": EntropyBonus(),
    "sft": MaskedCrossEntropyLoss(),
    "reverse_kl": ReverseKLLoss(),
    "tis_token": TruncatedISCorrection(
        TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.27), level="token"
    ),
    "tis_geomean": TruncatedISCorrection(ReinforceLoss(length_normalize=True), level="sequence_geomean"),
    "composite": CompositeLoss(
        [Term("pg", CISPOLoss()), Term("kl", TokenKLLoss(), 0.1), Term("h", EntropyBonus())]
    ),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("kept", [False, True], ids=["full", "kept"])
def test_every_loss_matches_the_masked_path(name: str, kept: bool) -> None:
    loss = LOSSES[name]
    batch = collate_saw_items(ragged_items(7, n=9), pad_token_id=0)
    logits = logits_for(batch, kept=kept, dtype=torch.float32, seed=7)
    results = []
    for make in (TokenLogpContext, MaskedContext):
        leaf = logits.clone().requires_grad_(True)
        per_sequence, stats = loss.sequence_terms(make(leaf, batch), batch)
        per_sequence.mean().backward()
        results.append((per_sequence.detach(), stats, leaf.grad))
    (fused_terms, fused_stats, fused_grad), (masked_terms, masked_stats, masked_grad) = results
    assert torch.equal(fused_terms, masked_terms)
    assert fused_stats.keys() == masked_stats.keys()
    for key in fused_stats:
        assert torch.equal(fused_stats[key], masked_stats[key]), key
    torch.testing.assert_close(fused_grad, masked_grad, rtol=0, atol=0)


def test_logits_without_gradient_are_scored_the_same() -> None:
    """Under no_grad (scoring, evaluation) the fused gather builds no graph and gives the same values."""
    batch = collate_saw_items(ragged_items(3), pad_token_id=0)
    logits = logits_for(batch, kept=True, dtype=torch.float32, seed=3)
    with torch.no_grad():
        fused = TokenLogpContext(logits, batch).token_logp
    assert not fused.requires_grad
    assert torch.equal(fused, MaskedContext(logits, batch).token_logp)
