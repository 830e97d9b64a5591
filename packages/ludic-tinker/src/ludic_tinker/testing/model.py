"""The tiny torch language model behind the fake Tinker service.

It is a real model, so sampling, logprobs, ``forward_backward`` and ``optim_step`` are real
computations: gradients flow, Adam moves the weights and a policy-gradient loss changes what the
sampler draws. It is deliberately small (about 25k parameters, byte-level vocabulary) so a
whole RL run takes seconds on one CPU core.

The "LoRA" of a training run is the whole tiny model (full fine-tuning); the rank is recorded only.

torch (the ``torch`` extra) is imported inside the functions that need it, so that ``import
ludic_tinker.testing`` works without it; :func:`require_torch` names the extra when it is missing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ludic_core.errors import missing_extra
from ludic_core.testing import ByteTokenizer

if TYPE_CHECKING:
    import torch

EOS_ID = 2
"""The tokenizer is ludic_core.testing's ByteTokenizer (id = byte + 3, EOS = 2), so the fake model and
ludic's test agents share token ids."""


class FakeTokenizer(ByteTokenizer):
    """``ByteTokenizer`` with the Hugging Face ``decode(ids, skip_special_tokens=...)`` signature."""

    def __init__(self) -> None:
        super().__init__(offset=3, eos_token_id=EOS_ID)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return super().decode(ids)


def seed_from_name(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big")


def require_torch() -> None:
    """Raise ``MissingExtraError`` naming ``ludic-tinker[torch]`` when torch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise missing_extra("ludic-tinker", "torch", "torch") from exc


class TinyLM:
    """Causal LM: each position sees its own embedding and the running mean of the prefix.

    A plain class over a ``torch.nn.ParameterDict`` rather than an ``nn.Module`` subclass: a subclass
    would need torch at import time. It offers what the fake service and the tests use of a module:
    ``parameters()``, ``state_dict()``, ``load_state_dict()`` and calling it on a token tensor.
    """

    def __init__(self, vocab_size: int, dim: int = 32, *, seed: int) -> None:
        require_torch()
        import torch
        from torch import nn

        gen = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        # Drawn in this order so a name's seed gives the same weights as before the move.
        embed = torch.randn(vocab_size, dim, generator=gen) * 0.5
        hidden = torch.randn(2 * dim, dim, generator=gen) / math.sqrt(2 * dim)
        bias = torch.zeros(dim)
        unembed = torch.randn(dim, vocab_size, generator=gen) / math.sqrt(dim)
        self.params = nn.ParameterDict(
            {
                "embed": nn.Parameter(embed),
                "hidden": nn.Parameter(hidden),
                "bias": nn.Parameter(bias),
                "unembed": nn.Parameter(unembed),
            }
        )

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.params.parameters()

    def state_dict(self) -> dict[str, Any]:
        return dict(self.params.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.params.load_state_dict(dict(state))

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.forward(tokens)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` [T] -> logits [T, V]; row t scores token t+1."""
        import torch

        p = self.params
        e = p["embed"][tokens]
        counts = torch.arange(1, len(tokens) + 1, dtype=e.dtype).unsqueeze(1)
        prefix_mean = torch.cumsum(e, dim=0) / counts
        h = torch.tanh(torch.cat([e, prefix_mean], dim=1) @ p["hidden"] + p["bias"])
        return h @ p["unembed"]

    def token_logprobs(self, tokens: Sequence[int], targets: Sequence[int]) -> torch.Tensor:
        """Logprob of ``targets[i]`` given ``tokens[: i + 1]``, with grad."""
        import torch

        logits = self.forward(torch.tensor(list(tokens), dtype=torch.long))
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp.gather(1, torch.tensor(list(targets), dtype=torch.long).unsqueeze(1)).squeeze(1)


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    import torch

    if top_k > 0 and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        drop = cum - torch.softmax(sorted_logits, dim=-1) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)
    return logits


def sample_sequence(
    model: TinyLM,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    stop_token_ids: frozenset[int],
    stop_strings: Sequence[str],
    generator: torch.Generator,
) -> tuple[list[int], list[float], str]:
    """Autoregressive sampling. Returns tokens, their logprobs (untempered, as the real service
    reportedly returns them) and the stop reason ``"stop"`` or ``"length"``."""
    import torch

    with torch.no_grad():
        tokenizer = FakeTokenizer()
        context = list(prompt)
        tokens: list[int] = []
        logprobs: list[float] = []
        for _ in range(max_tokens):
            logits = model.forward(torch.tensor(context, dtype=torch.long))[-1]
            raw_logp = torch.log_softmax(logits, dim=-1)
            if temperature == 0:
                tok = int(torch.argmax(logits))
            else:
                filtered = _filter_logits(logits / temperature, top_k, top_p)
                tok = int(torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=generator))
            tokens.append(tok)
            logprobs.append(float(raw_logp[tok]))
            context.append(tok)
            if tok in stop_token_ids:
                return tokens, logprobs, "stop"
            if stop_strings:
                text = tokenizer.decode(tokens, skip_special_tokens=False)
                if any(text.endswith(s) for s in stop_strings):
                    return tokens, logprobs, "stop"
        return tokens, logprobs, "length"


def datum_loss(
    loss_fn: str,
    p: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float],
) -> torch.Tensor:
    """The per-datum loss (a sum over tokens) of Tinker's built-in losses, per the Tinker docs.

    ``p`` are the learner's logprobs of ``target_tokens``; ``q`` the sampler's (``logprobs``).
    """
    import torch

    if loss_fn == "cross_entropy":
        return -(p * inputs["weights"]).sum()
    q = inputs["logprobs"]
    adv = inputs["advantages"]
    ratio = torch.exp(p - q)
    lo = config.get("clip_low_threshold", 0.8)
    hi = config.get("clip_high_threshold", 1.2)
    if loss_fn == "importance_sampling":
        return -(ratio * adv).sum()
    if loss_fn == "ppo":
        return -torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv).sum()
    if loss_fn == "cispo":
        return -(torch.clamp(ratio, lo, hi).detach() * p * adv).sum()
    if loss_fn == "dro":
        beta = config.get("beta", 0.0)
        return -(p * adv - 0.5 * beta * (p - q) ** 2).sum()
    if loss_fn == "gspo":
        # GSPO-token: every masked token carries the sequence's geometric-mean ratio (its value) and
        # its own logprob (its gradient).
        mask = inputs["sequence_ratio_mask"]
        n = torch.clamp(mask.sum(), min=1.0)
        seq_log_ratio = ((p - q) * mask).sum() / n
        token_ratio = torch.exp(seq_log_ratio.detach() + p - p.detach())
        obj = torch.minimum(token_ratio * adv, torch.clamp(token_ratio, lo, hi) * adv)
        return -(obj * mask).sum()
    raise ValueError(f"the fake service does not implement loss_fn={loss_fn!r}")
