"""The fake Tinker service's ``forward_backward``: the protobuf request decoded and checked against what
the SDK version and each built-in loss accept (:data:`REQUIRED_INPUTS`, :data:`ALLOWED_CONFIG`), then
computed on the tiny model."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from ludic_tinker.testing.loopback import Result, Violation
from ludic_tinker.testing.model import TinyLM, datum_loss

_CLIP_KEYS = frozenset({"clip_low_threshold", "clip_high_threshold"})
_RL_INPUTS = frozenset({"target_tokens", "logprobs", "advantages"})
REQUIRED_INPUTS: dict[str, frozenset[str]] = {
    "cross_entropy": frozenset({"target_tokens", "weights"}),
    "importance_sampling": _RL_INPUTS,
    "ppo": _RL_INPUTS,
    "cispo": _RL_INPUTS,
    "dro": _RL_INPUTS,
    "gspo": _RL_INPUTS | {"sequence_ratio_mask"},
}
ALLOWED_CONFIG: dict[str, frozenset[str]] = {
    "cross_entropy": frozenset(),
    "importance_sampling": frozenset(),
    "ppo": _CLIP_KEYS,
    "cispo": _CLIP_KEYS,
    "dro": frozenset({"beta"}),
    "gspo": _CLIP_KEYS,
}


@attrs.frozen
class ForwardBackwardCall:
    """One received ``forward_backward`` request, decoded, for assertions in tests."""

    model_id: str
    loss_fn: str
    loss_fn_config: dict[str, float]
    forward_only: bool
    model_inputs: list[list[int]]
    loss_fn_inputs: list[dict[str, np.ndarray]]


def _known_loss_fns() -> frozenset[str]:
    return frozenset(typing.get_args(types.LossFnType))


def decode_forward_backward(msg: Any, check_tokens: Callable[[list[int], str], None]) -> ForwardBackwardCall:
    """The ``ForwardBackwardRequest`` ``msg`` checked and decoded; ``check_tokens(ids, what)`` refuses
    token ids outside the vocabulary."""
    loss_fn = msg.loss_fn
    if loss_fn not in _known_loss_fns():
        raise Violation(
            f"loss_fn {loss_fn!r} is not a LossFnType of this SDK version ({sorted(_known_loss_fns())})"
        )
    if loss_fn not in REQUIRED_INPUTS:
        raise Violation(f"the fake service does not implement loss_fn {loss_fn!r}")
    config = {k: float(v) for k, v in msg.loss_fn_config.items()}
    unknown_config = set(config) - ALLOWED_CONFIG[loss_fn]
    if unknown_config:
        raise Violation(f"loss_fn_config keys {sorted(unknown_config)} are not used by {loss_fn!r}")
    if not all(math.isfinite(v) for v in config.values()):
        raise Violation(f"loss_fn_config has non-finite values: {config}")
    if not msg.data:
        raise Violation("forward_backward got no data")
    model_inputs, inputs_list = [], []
    for i, datum in enumerate(msg.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise Violation(f"datum {i}: only encoded_text chunks are supported")
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        if not tokens:
            raise Violation(f"datum {i}: empty model_input")
        check_tokens(tokens, f"datum {i} model_input")
        names = set(datum.loss_fn_inputs.keys())
        required = REQUIRED_INPUTS[loss_fn]
        if names != required:
            raise Violation(
                f"datum {i}: loss {loss_fn!r} needs loss_fn_inputs {sorted(required)}, got {sorted(names)}"
            )
        arrays: dict[str, np.ndarray] = {}
        for name in sorted(names):
            tensor = datum.loss_fn_inputs[name]
            if tensor.WhichOneof("encoding") != "dense":
                raise Violation(f"datum {i}: {name} is not dense")
            want = pb.DTYPE_INT64 if name == "target_tokens" else pb.DTYPE_FLOAT32
            if tensor.dtype != want:
                raise Violation(f"datum {i}: {name} has dtype {tensor.dtype}, expected {want}")
            arr = np.frombuffer(tensor.dense, dtype=np.int64 if want == pb.DTYPE_INT64 else np.float32)
            if list(tensor.shape) not in ([len(arr)], []):
                raise Violation(f"datum {i}: {name} has shape {list(tensor.shape)} but {len(arr)} values")
            if len(arr) != len(tokens):
                raise Violation(
                    f"datum {i}: {name} has {len(arr)} entries but model_input has {len(tokens)} tokens"
                )
            if arr.dtype == np.float32 and not np.all(np.isfinite(arr)):
                raise Violation(f"datum {i}: {name} has non-finite values")
            arrays[name] = arr.copy()
        check_tokens(arrays["target_tokens"].tolist(), f"datum {i} target_tokens")
        model_inputs.append(tokens)
        inputs_list.append(arrays)
    return ForwardBackwardCall(msg.model_id, loss_fn, config, msg.forward_only, model_inputs, inputs_list)


def run_forward_backward(model: TinyLM, call: ForwardBackwardCall) -> Result:
    """``call``'s loss on ``model``, its gradients accumulated unless ``forward_only``; the result as
    the service sends it."""
    import torch

    total = torch.zeros(())
    per_datum: list[np.ndarray] = []
    for tokens, arrays in zip(call.model_inputs, call.loss_fn_inputs, strict=True):
        p = model.token_logprobs(tokens, arrays["target_tokens"].tolist())
        tensors = {
            k: torch.from_numpy(v.astype(np.float32)) for k, v in arrays.items() if k != "target_tokens"
        }
        total = total + datum_loss(call.loss_fn, p, tensors, call.loss_fn_config)
        per_datum.append(p.detach().numpy().astype(np.float32))
    if not call.forward_only:
        total.backward()  # gradients accumulate until optim_step, as on the real service
    out = pb.ForwardBackwardOutput(loss_fn_output_type="TorchLossReturn")
    out.metrics["loss:sum"] = float(total.detach())
    record = out.loss_fn_outputs.add(type_tag="TorchLossReturn", num_datums=len(per_datum))
    field = record.fields["logprobs"]
    field.dtype = pb.DTYPE_FLOAT32
    field.data = b"".join(a.tobytes() for a in per_datum)
    field.offsets = np.cumsum([0] + [a.nbytes for a in per_datum]).astype(np.int64).tobytes()
    return Result(out.SerializeToString(), "application/x-protobuf")
