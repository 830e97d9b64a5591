"""The loss's token-logprob path alone: the fused action-row gather against the former boolean-mask path.

Both sides compute GRPO's token-level clipped surrogate and its gradient w.r.t. the logits, forward and
backward, on the same collated batch and the same logits:

* ``fused`` — ``TokenLogpContext`` as shipped: the action rows read by integer index in one fused gather
  whose backward writes their gradient straight into the logits' gradient;
* ``masked`` — the former path (as ``packages/ludic-train/tests/test_fused_gather.py`` keeps it for its
  equality checks): rows selected with the boolean action mask, values scattered back through it.

Two batch shapes: ``ragged`` (bench_trainer_step's 32 items, the tiny model's 642-token vocabulary) and
``tic_tac_toe`` (bench_trainer_logits' 16 items with SmolLM2's 49,152-token vocabulary), each with
logits at the batch's ``logit_positions`` (what the Trainer passes) and with full logits. Values and
gradients are checked equal first. Sides interleave per repetition; medians and the ratio fused / masked
are printed as one JSON object.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Mapping

import torch
from _machine import emit, machine_facts
from torch import Tensor

from ludic_core.saw import SAWItem
from ludic_train.collate import collate_saw_items
from ludic_train.losses import TokenClippedSurrogateLoss
from ludic_train.losses.base import TokenLogpContext


class MaskedContext(TokenLogpContext):
    """The boolean-mask selection and scatter-back the context used before the fused gather."""

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

    @property
    def token_logp(self) -> Tensor:
        if self._token_logp is None:
            with torch.enable_grad():
                rows = self._masked_rows()
                chosen = self.targets[self.mask_bool].unsqueeze(-1)
                values = rows.gather(-1, chosen).squeeze(-1) - torch.logsumexp(rows, dim=-1)
                out = torch.zeros(self.mask.shape, dtype=values.dtype, device=values.device)
                out[self.mask_bool] = values
                self._token_logp = out
        return self._token_logp


def items(n: int, *, vocab: int, prompt: tuple[int, int], completion: tuple[int, int]) -> list[SAWItem]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        p, c = rng.randint(*prompt), rng.randint(*completion)
        out.append(
            SAWItem(
                input_ids=[rng.randrange(5, vocab) for _ in range(p + c)],
                action_mask=[0] * p + [1] * c,
                weight=rng.uniform(-1, 1),
                meta={"rollout_id": f"r{i}"},
                actor_logps=[rng.uniform(-4.0, -0.5) for _ in range(c)],
                sampling_temperature=0.7,
            )
        )
    return out


BATCHES: dict[str, Callable[[], tuple[list[SAWItem], int]]] = {
    "ragged": lambda: (items(32, vocab=642, prompt=(16, 128), completion=(8, 128)), 642),
    "tic_tac_toe": lambda: (items(16, vocab=49_152, prompt=(90, 110), completion=(8, 8)), 49_152),
}


def step(make: type[TokenLogpContext], logits: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
    leaf = logits.detach().requires_grad_(True)
    per_sequence, _ = TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.2).sequence_terms(
        make(leaf, batch), batch
    )
    loss = per_sequence.mean()
    loss.backward()
    assert leaf.grad is not None
    return loss.detach(), leaf.grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.repeats < 1 or args.threads < 1:
        parser.error(f"--repeats and --threads must be >= 1, got {args.repeats} and {args.threads}")
    torch.set_num_threads(args.threads)
    facts = machine_facts()
    results = {}
    for name, build in BATCHES.items():
        batch_items, vocab = build()
        batch = collate_saw_items(batch_items, pad_token_id=0)
        size, length = batch["input_ids"].shape
        for layout, width in (("kept", batch["logit_positions"].shape[0]), ("full", length)):
            logits = torch.randn(size, width, vocab, generator=torch.Generator().manual_seed(0))
            (fused_loss, fused_grad), (masked_loss, masked_grad) = (
                step(TokenLogpContext, logits, batch),
                step(MaskedContext, logits, batch),
            )
            if not (torch.equal(fused_loss, masked_loss) and torch.equal(fused_grad, masked_grad)):
                raise SystemExit(f"{name}/{layout}: the fused and masked paths disagree")
            times: dict[str, list[float]] = {"fused": [], "masked": []}
            for _ in range(args.repeats):
                for side, make in (("fused", TokenLogpContext), ("masked", MaskedContext)):
                    start = time.perf_counter()
                    step(make, logits, batch)
                    times[side].append(time.perf_counter() - start)
            medians = {side: statistics.median(values) for side, values in times.items()}
            results[f"{name}/{layout}"] = {
                "logits_shape": [size, width, vocab],
                "action_tokens": int(batch["action_mask"].sum()),
                "seconds": medians,
                "ratio_fused_vs_masked": medians["fused"] / medians["masked"],
            }
    ratios = {k: v["ratio_fused_vs_masked"] for k, v in results.items()}
    emit(
        {
            "benchmark": "loss_gather_fused_vs_masked",
            "threads": args.threads,
            "repeats": args.repeats,
            "cases": results,
            "ratio_fused_vs_masked": ratios,
        },
        facts=facts,
        headline={f"fused / masked, {case}": round(ratio, 2) for case, ratio in ratios.items()},
    )


if __name__ == "__main__":
    main()
