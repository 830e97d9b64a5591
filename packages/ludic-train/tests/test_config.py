"""TrainerConfig refuses every hostile value at construction, naming the field and the value."""

from __future__ import annotations

import math

import pytest

from ludic_core.errors import ConfigError
from ludic_train.config import TrainerConfig


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pad_token_id", -5),
        ("device", "banana"),
        ("device", "cuda:x"),
        ("optimizer", "adam"),
        ("lr", True),
        ("lr", math.nan),
        ("lr", -1e-5),
        ("weight_decay", math.inf),
        ("weight_decay", -0.1),
        ("betas", (0.9, 1.0)),
        ("betas", (0.9,)),
        ("betas", (math.nan, 0.9)),
        ("eps", 0.0),
        ("max_grad_norm", math.inf),
        ("max_grad_norm", None),
        ("max_seq_len", 1.5),
        ("micro_token_budget", 0),
        ("publish_every_steps", -1),
        ("cast_logits_to_fp32", "yes"),
        ("gradient_checkpointing", 1),
        ("share_prompt_prefix", None),
        ("skip_zero_weight_items", 0),
        ("max_lag", -1),
        ("max_refills", 2.5),
        ("log_every", 0),
        ("eval_at_start", "no"),
        ("eval_every_steps", -1),
        ("eval_every_steps", None),
        ("max_consecutive_skipped_steps", 0),
    ],
)
def test_hostile_values_are_refused_naming_the_field(field: str, value: object) -> None:
    settings: dict[str, object] = {"pad_token_id": 0, "max_seq_len": 8, "micro_token_budget": 8}
    settings[field] = value
    with pytest.raises(ConfigError, match=rf"TrainerConfig\.{field}\b") as raised:
        TrainerConfig(**settings)  # type: ignore[arg-type]
    parts = value if isinstance(value, tuple) else ()
    assert any(f"got {v!r}" in str(raised.value) for v in (value, *parts)), raised.value


def test_defaults_and_devices_pass() -> None:
    for device in (None, "cpu", "cuda", "cuda:1", "mps"):
        assert TrainerConfig(pad_token_id=0, device=device).device == device
    assert TrainerConfig(pad_token_id=0, max_grad_norm=0, max_lag=None).max_grad_norm == 0
