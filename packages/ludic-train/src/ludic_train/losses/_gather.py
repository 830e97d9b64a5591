"""The log-probability of each action token, read straight from the logits in one fused gather.

The rows of the logits that score action tokens are picked by integer row index (``index_select`` on the
logits seen as ``[rows, V]``), so neither direction of the pass materialises a boolean-mask selection or
scatters through a mask: forward is one copy of the action rows, one log-sum-exp and one gather; backward
is one softmax of the saved rows and one ``index_copy`` of their gradients into a zero ``[rows, V]``
tensor (the autograd graph of the unfused ops allocates a ``[N, V]`` zero tensor for the gather, another
for the log-sum-exp and a third, logits-sized, for the boolean index).

The value is computed with exactly the ops of the unfused form, ``x[target] − logsumexp(x)`` with
``x = rows.to(dtype) / temperature``, so forward results are bit-identical to it; the gradient is the
same expression, ``(onehot(target) − softmax(x)) · g / temperature``, up to float rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["action_rows", "gather_token_logp"]


def action_rows(logits: Tensor, rows: Tensor, dtype: torch.dtype, temperature: Tensor | None) -> Tensor:
    """``[N, V]`` rows ``rows`` of ``logits`` (seen as ``[-1, V]``), upcast to ``dtype`` and divided by
    each row's temperature; differentiable through ordinary autograd (the entropy uses it)."""
    picked = logits.reshape(-1, logits.shape[-1]).index_select(0, rows).to(dtype)
    return picked if temperature is None else picked / temperature[:, None]


class _GatherTokenLogp(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        logits: Tensor,
        rows: Tensor,
        targets: Tensor,
        temperature: Tensor | None,
        dtype: torch.dtype,
    ) -> Tensor:
        with torch.no_grad():
            x = action_rows(logits, rows, dtype, temperature)
            lse = torch.logsumexp(x, dim=-1)
            values = x.gather(-1, targets[:, None]).squeeze(-1) - lse
        ctx.save_for_backward(x, lse, rows, targets, temperature)
        ctx.logits_shape = logits.shape
        ctx.logits_dtype = logits.dtype
        return values

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        x, lse, rows, targets, temperature = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        # d(x[target] − lse)/dx = onehot(target) − softmax(x), times the incoming gradient.
        grad_x = (x - lse[:, None]).exp_().mul_(-grad[:, None])
        grad_x.scatter_add_(-1, targets[:, None], grad[:, None])
        if temperature is not None:
            grad_x = grad_x.div_(temperature[:, None])
        shape = ctx.logits_shape
        flat = grad_x.new_zeros((shape.numel() // shape[-1], shape[-1]), dtype=ctx.logits_dtype)
        flat.index_copy_(0, rows, grad_x.to(ctx.logits_dtype))
        return flat.view(shape), None, None, None, None


def gather_token_logp(
    logits: Tensor, rows: Tensor, targets: Tensor, temperature: Tensor | None, dtype: torch.dtype
) -> Tensor:
    """``[N]`` log-probabilities ``log_softmax(x_i)[targets_i]`` of the rows ``x = action_rows(...)``.

    ``rows`` index ``logits`` seen as ``[-1, V]`` and must be distinct (each action token has one row);
    ``temperature`` is per row (``[N]``) or None for τ = 1.
    """
    values: Tensor = _GatherTokenLogp.apply(logits, rows, targets, temperature, dtype)
    return values
