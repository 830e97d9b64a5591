"""Picking tokens for a batch of rows at once, each row with its own sampling parameters and random
stream (the local client's decode step), and the logprob of a chosen token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ludic_core.inference import TokenCompletionRequest

if TYPE_CHECKING:
    import torch

__all__ = ["BatchSampler", "chosen_logprobs", "filter_rows", "inverse_cdf"]


def chosen_logprobs(logits: torch.Tensor, targets: Sequence[int]) -> list[float]:
    """``log_softmax(logits[k])[targets[k]]`` for each row ``k`` of ``[len(targets), V]`` logits, in float32."""
    import torch

    if not targets:
        return []
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(list(targets), dtype=torch.long, device=logits.device)[:, None]
    return [float(x) for x in logprobs.gather(-1, index).squeeze(-1).tolist()]


class BatchSampler:
    """Picks one token per row of a decode step, all rows at once.

    Greedy rows (temperature 0) take the argmax. Sampled rows scale by their temperature, apply their
    top-k / min-p / top-p filters (only rows that set one pay for it) and invert their cumulative
    distribution at one uniform number drawn from their own generator: a request's random stream is one
    draw per token, whatever else shares the batch.
    """

    def __init__(
        self,
        requests: Sequence[TokenCompletionRequest],
        generators: Sequence[torch.Generator],
        device: torch.device,
    ) -> None:
        self._device = device
        self._requests = list(requests)
        self._generators = list(generators)
        self._refresh()

    def select(self, keep: Sequence[int]) -> None:
        """Keep only these rows (positions in the current batch), in this order."""
        self._requests = [self._requests[j] for j in keep]
        self._generators = [self._generators[j] for j in keep]
        self._refresh()

    def _refresh(self) -> None:
        import torch

        sampling = [r.sampling for r in self._requests]
        temps = [s.temperature for s in sampling]
        self._sampled = [j for j, t in enumerate(temps) if t > 0]
        self._all_sampled = len(self._sampled) == len(temps)
        # Greedy rows keep their untempered logits (their logprobs are untempered).
        self._unit_temps = all(t in (0.0, 1.0) for t in temps)
        self._temps = torch.tensor([t if t > 0 else 1.0 for t in temps], device=self._device)
        rows = [sampling[j] for j in self._sampled]
        self._top_k = [s.top_k or 0 for s in rows]
        self._top_p = [s.top_p for s in rows]
        self._min_p = [s.min_p for s in rows]
        self._sampled_index = torch.tensor(self._sampled, dtype=torch.long, device=self._device)
        greedy = [j for j, t in enumerate(temps) if t == 0]
        self._greedy_index = torch.tensor(greedy, dtype=torch.long, device=self._device)

    def sample(self, logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """``logits``: ``[rows, vocab]`` float32. Returns each row's token and its logprob."""
        import torch

        scaled = logits if self._unit_temps else logits / self._temps[:, None]
        logprobs = torch.log_softmax(scaled, dim=-1)
        if not self._sampled:
            tokens = torch.argmax(logits, dim=-1)
        else:
            rows = scaled if self._all_sampled else scaled[self._sampled_index]
            filtered = filter_rows(rows, top_k=self._top_k, top_p=self._top_p, min_p=self._min_p)
            if filtered is not None:
                probs = torch.softmax(filtered, dim=-1)
            else:
                probs = (logprobs if self._all_sampled else logprobs[self._sampled_index]).exp()
            uniforms = torch.cat(
                [torch.rand(1, generator=self._generators[j], dtype=torch.float64) for j in self._sampled]
            )
            picked = inverse_cdf(probs, uniforms.to(probs.device))
            if self._all_sampled:
                tokens = picked
            else:
                tokens = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
                tokens[self._sampled_index] = picked
                tokens[self._greedy_index] = torch.argmax(logits[self._greedy_index], dim=-1)
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
        return [int(t) for t in tokens.tolist()], [float(x) for x in chosen.tolist()]


# Tokens per block of the two-level inverse CDF.
_CDF_BLOCK = 256


def inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row of non-negative ``weights``, the first index whose cumulative weight exceeds
    ``uniform × total``: a draw from the normalised weights, never of a zero-weight index.

    Two levels, because a float32 running sum over a 50k vocabulary rounds away the mass of tail tokens
    and a float64 one costs several passes over the logits: per-block sums in float32 (each exact to a
    few ulps of its block's own mass), their running sum in float64, then a float64 running sum inside
    the chosen block only.
    """
    import torch

    rows, vocab = weights.shape
    if vocab % _CDF_BLOCK:
        weights = torch.nn.functional.pad(weights, (0, _CDF_BLOCK - vocab % _CDF_BLOCK))
    blocks = weights.contiguous().view(rows, -1, _CDF_BLOCK)
    block_cdf = blocks.sum(-1).double().cumsum_(-1)
    targets = uniforms * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, targets[:, None], right=True).squeeze(1)
    block = block.clamp_(max=block_cdf.shape[1] - 1)
    before = block_cdf.gather(1, (block - 1).clamp(min=0)[:, None]).squeeze(1).masked_fill_(block == 0, 0.0)
    inner = blocks[torch.arange(rows, device=weights.device), block].double().cumsum_(-1)
    index = torch.searchsorted(inner, (targets - before)[:, None], right=True).squeeze(1)
    # The block sum and this running sum round differently; a target past the block's running total
    # takes the block's last token of positive weight, never a zero-weight one after it.
    last = (inner < inner[:, -1:]).sum(-1)
    return block * _CDF_BLOCK + torch.minimum(index, last)


def filter_rows(
    logits: torch.Tensor, *, top_k: Sequence[int], top_p: Sequence[float], min_p: Sequence[float]
) -> torch.Tensor | None:
    """Top-k, then min-p, then top-p per row (``top_k`` 0: off); ``None`` when no row filters."""
    import torch

    vocab = logits.shape[-1]
    ks = [k if 0 < k < vocab else 0 for k in top_k]
    use_k, use_min_p, use_top_p = any(ks), any(m > 0 for m in min_p), any(p < 1.0 for p in top_p)
    if not (use_k or use_min_p or use_top_p):
        return None
    out = logits
    neg_inf = float("-inf")
    if use_k:
        k = torch.tensor(ks, device=out.device)
        kth = torch.topk(out, max(ks), dim=-1).values.gather(1, (k - 1).clamp(min=0)[:, None])
        kth = torch.where(k[:, None] > 0, kth, torch.full_like(kth, neg_inf))
        out = out.masked_fill(out < kth, neg_inf)
    if use_min_p:
        probs = torch.softmax(out, dim=-1)
        floor = torch.tensor(min_p, dtype=probs.dtype, device=out.device)[:, None] * probs.amax(
            -1, keepdim=True
        )
        out = out.masked_fill(probs < floor, neg_inf)
    if use_top_p:
        sorted_logits, order = torch.sort(out, descending=True, dim=-1)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Rows without top-p never drop (their mass before a tail token can round up to 1.0).
        threshold = torch.tensor([p if p < 1.0 else float("inf") for p in top_p], device=out.device)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= threshold[:, None]
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        out = out.masked_fill(drop, neg_inf)
    return out
