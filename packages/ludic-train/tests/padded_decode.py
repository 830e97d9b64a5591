"""A padded prefill and greedy decode steps through a KV cache, as the local sampler runs them: the
shared scenario of the KV-cache and attention tests."""

from __future__ import annotations

from typing import Any

import torch


def padded_decode(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    steps: int,
    *,
    cache: Any = None,
    drop_row_at: int | None = None,
) -> list[torch.Tensor]:
    """The logits of every position of a left-padded prefill (``ids`` and ``mask``, into ``cache``;
    ``None`` lets the model make its own), then the logits of ``steps`` greedy decode steps. At step
    ``drop_row_at`` the second row leaves the batch, as the sampler drops finished rows."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        )
        logits, cache, next_pos = [out.logits], out.past_key_values, positions[:, -1:] + 1
        for step in range(steps):
            token = out.logits[:, -1, :].argmax(-1, keepdim=True)
            if step == drop_row_at:
                keep = torch.tensor([i for i in range(ids.shape[0]) if i != 1])
                cache.batch_select_indices(keep)
                token, mask, next_pos = token[keep], mask[keep], next_pos[keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            out = model(
                input_ids=token,
                attention_mask=mask,
                position_ids=next_pos,
                past_key_values=cache,
                use_cache=True,
            )
            logits.append(out.logits)
            cache, next_pos = out.past_key_values, next_pos + 1
    return logits
