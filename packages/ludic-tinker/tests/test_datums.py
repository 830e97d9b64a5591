"""SAW items → Tinker datums, checked token by token (no service needed)."""

from __future__ import annotations

import pytest

from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWItem
from ludic_tinker import TinkerLoss, item_to_datum, items_to_datums

# prompt (3 tokens) + action (2) + tool output (2, masked) + action (2)
ITEM = SAWItem(
    input_ids=[10, 11, 12, 20, 21, 30, 31, 22, 23],
    action_mask=[0, 0, 0, 1, 1, 0, 0, 1, 1],
    weight=0.5,
    actor_logps=[-0.1, -0.2, -0.3, -0.4],
)


def _arrays(datum):  # type: ignore[no-untyped-def]
    return {k: v.tolist() for k, v in datum.loss_fn_inputs.items()}


def test_rl_datum_is_shifted_with_inputs_on_action_positions_only():
    datum = item_to_datum(
        ITEM, TinkerLoss.ppo(clip_low=0.8, clip_high=1.2, normalization="sum"), batch_size=1
    )
    assert datum.model_input.to_ints() == [10, 11, 12, 20, 21, 30, 31, 22]
    a = _arrays(datum)
    assert a["target_tokens"] == [11, 12, 20, 21, 30, 31, 22, 23]
    assert a["logprobs"] == pytest.approx([0, 0, -0.1, -0.2, 0, 0, -0.3, -0.4])
    assert a["advantages"] == pytest.approx([0, 0, 0.5, 0.5, 0, 0, 0.5, 0.5])
    assert set(a) == {"target_tokens", "logprobs", "advantages"}
    assert datum.loss_fn_inputs["target_tokens"].dtype == "int64"
    assert datum.loss_fn_inputs["advantages"].dtype == "float32"


@pytest.mark.parametrize(
    ("normalization", "scale"),
    [("sum", 1.0), ("sequence_mean", 1 / 4), ("token_mean_per_sequence", 1 / (4 * 4))],
)
def test_normalization_scales_advantages(normalization, scale):
    datum = item_to_datum(
        ITEM, TinkerLoss.cispo(clip_low=0.8, clip_high=1.2, normalization=normalization), batch_size=4
    )
    assert max(_arrays(datum)["advantages"]) == pytest.approx(0.5 * scale)


def test_cross_entropy_sends_weights_not_logprobs_and_gspo_adds_ratio_mask():
    ce = _arrays(item_to_datum(ITEM, TinkerLoss.cross_entropy(normalization="sum"), batch_size=1))
    assert set(ce) == {"target_tokens", "weights"}
    assert ce["weights"] == pytest.approx([0, 0, 0.5, 0.5, 0, 0, 0.5, 0.5])
    gspo = _arrays(item_to_datum(ITEM, TinkerLoss.gspo(clip_low=1 - 3e-4, clip_high=1 + 4e-4), batch_size=1))
    assert gspo["sequence_ratio_mask"] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_one_datum_per_item():
    items = [ITEM, ITEM, ITEM]
    assert len(items_to_datums(items, TinkerLoss.ppo(clip_low=0.8, clip_high=1.2))) == 3


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            SAWItem(input_ids=[1, 2, 3], action_mask=[0, 1, 1], weight=1.0),
            "actor_logps",
        ),
        (
            SAWItem(
                input_ids=[1, 2, 3],
                action_mask=[1, 0, 1],
                weight=1,
                actor_logps=[0, 0],
            ),
            "first token",
        ),
        (
            SAWItem(input_ids=[1, 2, 3], action_mask=[0, 0, 0], weight=1.0),
            "no action",
        ),
    ],
)
def test_invalid_items_raise_naming_the_problem(item, message):
    with pytest.raises(DataError, match=message):
        items_to_datums([item], TinkerLoss.ppo(clip_low=0.8, clip_high=1.2))


def test_loss_config_is_validated():
    with pytest.raises(ConfigError, match="beta"):
        TinkerLoss("ppo", {"beta": 0.1})
    with pytest.raises(ConfigError, match="low < 1 < high"):
        TinkerLoss.ppo(clip_low=1.1, clip_high=1.2)
    with pytest.raises(ConfigError, match="loss_fn"):
        TinkerLoss("grpo")
