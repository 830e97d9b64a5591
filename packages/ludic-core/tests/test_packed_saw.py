"""PackedSAWItem.from_arrays: items a builder packs once, that read, compare, evolve, copy and pickle
as the SAWItem of the same values, and refuse what SAWItem refuses, naming the field and the value."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
from array import array
from typing import Any

import attrs
import pytest
from core_data_builders import still_packed
from hypothesis import given, settings
from hypothesis import strategies as st

from ludic_core.errors import DataError
from ludic_core.packed_saw import UINT32, PackedSAWItem, packed_arrays, with_meta
from ludic_core.saw import SAWItem


def packed(
    ids: list[int],
    runs: list[int],
    *,
    logps: list[float] | None = None,
    teacher: list[float] | None = None,
    **values: Any,
) -> PackedSAWItem:
    return PackedSAWItem.from_arrays(
        input_ids=array(UINT32, ids),
        action_runs=runs,
        weight=values.pop("weight", 0.5),
        meta=values.pop("meta", {"rollout_id": "r"}),
        actor_logps=None if logps is None else array("d", logps),
        teacher_logps=None if teacher is None else array("d", teacher),
        **values,
    )


def test_an_item_built_from_arrays_is_the_item_of_the_same_tuples() -> None:
    # Logprobs that float32 cannot hold come back exactly: the builder's arrays are float64.
    logps = [-0.1, -2.302585092994046, -1e-300]
    item = packed(
        [7, 150_000, 2**32 - 1, 3, 4],
        [1, 3, 1],
        logps=logps,
        teacher=[-1.0, -2.0, -3.0],
        weight=1 / 3,
        sampling_temperature=0.7,
    )
    same = SAWItem(
        input_ids=(7, 150_000, 2**32 - 1, 3, 4),
        action_mask=(0, 1, 1, 1, 0),
        weight=1 / 3,
        meta={"rollout_id": "r"},
        actor_logps=logps,
        teacher_logps=(-1.0, -2.0, -3.0),
        sampling_temperature=0.7,
    )
    arrays = ("input_ids", "action_mask", "actor_logps", "teacher_logps")
    # Lengths and counts come from the packed arrays, without unpacking them.
    assert len(item) == 5 and item.num_action_tokens == 3
    assert all(still_packed(item, field) for field in arrays)
    assert item == same and same == item
    assert (item != same, same != item) == (False, False)
    assert item != attrs.evolve(same, weight=0.25) and attrs.evolve(same, weight=0.25) != item
    assert repr(item) == "Packed" + repr(same) and item.to_dict() == same.to_dict()
    assert all(type(v) is int for v in item.input_ids + item.action_mask)
    assert item.actor_logps == tuple(logps) and all(type(v) is float for v in item.actor_logps)
    assert item.input_ids is item.input_ids  # unpacked once, then kept
    assert SAWItem.from_dict(item.to_dict()) == item  # SAWItem's own validators accept every field


def test_items_without_logprobs_and_with_converted_values() -> None:
    # SAWItem's converters: an int weight or temperature becomes a float.
    item = packed([1, 2], [2], weight=2, sampling_temperature=1)
    assert (item.actor_logps, item.teacher_logps, item.meta) == (None, None, {"rollout_id": "r"})
    assert item.action_mask == (0, 0) and item.num_action_tokens == 0
    assert type(item.weight) is float and type(item.sampling_temperature) is float
    assert PackedSAWItem.from_arrays(input_ids=array(UINT32, [1]), action_runs=[0, 1], weight=0).meta == {}


def test_evolve_copy_and_pickle_give_equal_items_that_hold_tuples() -> None:
    item = packed([5, 6, 7, 8], [2, 2], logps=[-0.5, -0.25], meta={"rollout_id": "r", "v": 1})
    same = SAWItem(
        input_ids=(5, 6, 7, 8),
        action_mask=(0, 0, 1, 1),
        weight=0.5,
        meta={"rollout_id": "r", "v": 1},
        actor_logps=(-0.5, -0.25),
    )
    evolved = attrs.evolve(item, meta={"rollout_id": "r", "v": 2})
    assert isinstance(evolved, PackedSAWItem) and packed_arrays(evolved) is None
    assert evolved == attrs.evolve(same, meta={"rollout_id": "r", "v": 2}) and len(evolved) == 4
    with pytest.raises(DataError, match="action_mask has length 3"):
        attrs.evolve(item, action_mask=(0, 1, 1))  # SAWItem's validators run on what evolve sets
    for twin in (copy.copy(item), copy.deepcopy(item), pickle.loads(pickle.dumps(item))):
        assert twin == same and twin.input_ids == (5, 6, 7, 8)
    assert packed_arrays(item) is not None and packed_arrays(same) is None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        item.weight = 2.0  # type: ignore[misc]


def test_with_meta_keeps_the_arrays_packed() -> None:
    item = packed([5, 6, 7, 8], [2, 2], logps=[-0.5, -0.25], sampling_temperature=0.5)
    tagged = with_meta(item, {"rollout_id": "r", "policy_version": 3})
    assert packed_arrays(tagged) is packed_arrays(item) and tagged.meta["policy_version"] == 3
    assert all(still_packed(tagged, field) for field in ("input_ids", "action_mask", "actor_logps"))
    assert tagged == attrs.evolve(item, meta={"rollout_id": "r", "policy_version": 3}) and item.meta == {
        "rollout_id": "r"
    }
    plain = SAWItem(input_ids=[1], action_mask=[1], weight=0.0, actor_logps=[-1.0])
    assert (
        with_meta(plain, {"x": 1}) == attrs.evolve(plain, meta={"x": 1})
        and type(with_meta(plain, {})) is SAWItem
    )


def test_the_item_keeps_its_own_copy_of_the_arrays() -> None:
    ids, logps = array(UINT32, [1, 2, 3]), array("d", [-1.0])
    item = PackedSAWItem.from_arrays(input_ids=ids, action_runs=[2, 1], weight=0.0, actor_logps=logps)
    ids[0], logps[0] = 99, -9.0  # the builder reuses its buffers
    assert item.input_ids == (1, 2, 3) and item.actor_logps == (-1.0,)


def _runs(mask: list[int]) -> list[int]:
    """Run lengths of 0s, 1s, 0s, ... (the first may be 0, no other is)."""
    runs = [len(list(group)) for _, group in itertools.groupby(mask)]
    return [0, *runs] if mask[0] == 1 else runs


@settings(max_examples=150, deadline=None)
@given(
    mask=st.lists(st.integers(0, 1), min_size=1, max_size=40),
    empties=st.lists(st.integers(0, 3), max_size=6),
)
def test_empty_runs_anywhere_give_the_same_mask_and_the_wires_runs(
    mask: list[int], empties: list[int]
) -> None:
    # A builder appends one prompt run and one completion run per model call; either may be empty.
    runs = _runs(mask)
    for where in empties:
        position = min(where * 2, len(runs))  # two empty runs keep 0s and 1s alternating
        runs[position:position] = [0, 0]
    item = packed(list(range(len(mask))), runs)
    assert item.action_mask == tuple(mask) and item.num_action_tokens == sum(mask)
    assert packed_arrays(item).mask_runs == _runs(mask)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        (
            {"input_ids": [1, 2]},
            r"PackedSAWItem.input_ids must be an array\('I'\) of token ids, got list \[1, 2\]",
        ),
        ({"input_ids": array("i", [1, -2])}, r"input_ids must be an array\('I'\).*got array\('i'\) of 2"),
        ({"input_ids": array(UINT32), "action_runs": []}, "SAWItem.input_ids must not be empty"),
        ({"action_runs": [1, -1, 2]}, r"action_runs\[1\] must be an int >= 0, got -1"),
        ({"action_runs": [1, True]}, r"action_runs\[1\] must be an int >= 0, got True"),
        ({"action_runs": [1, 2.0]}, r"action_runs\[1\] must be an int >= 0, got 2.0"),
        ({"action_runs": "12"}, "action_runs must be a sequence of run lengths, got str '12'"),
        ({"action_runs": [1, 1]}, "action_runs cover 2 tokens, input_ids has 3"),
        (
            {"actor_logps": [-1.0, -2.0]},
            r"PackedSAWItem.actor_logps must be None or an array\('d'\).*got list",
        ),
        ({"actor_logps": array("f", [-1.0, -2.0])}, r"actor_logps .*got array\('f'\) of 2"),
        ({"actor_logps": array("d", [-1.0])}, "SAWItem.actor_logps has 1 entries but action_mask has 2 ones"),
        (
            {"teacher_logps": array("d", [-1.0] * 3)},
            "SAWItem.teacher_logps has 3 entries but action_mask has 2",
        ),
        ({"weight": math.nan}, "SAWItem.weight must be finite, got nan"),
        ({"weight": "heavy"}, "SAWItem.weight must be a finite number, got 'heavy'"),
        (
            {"sampling_temperature": -0.5},
            "sampling_temperature must be None or a finite number >= 0, got -0.5",
        ),
        ({"sampling_temperature": math.inf}, "sampling_temperature must be .* got inf"),
        ({"sampling_temperature": True}, "sampling_temperature must be .* got True"),
        ({"meta": [("rollout_id", "r")]}, "SAWItem.meta must be a dict, got list"),
    ],
)
def test_from_arrays_refuses_naming_the_field_and_the_value(arguments: dict[str, Any], match: str) -> None:
    values: dict[str, Any] = {
        "input_ids": array(UINT32, [1, 2, 3]),
        "action_runs": [1, 2],
        "weight": 0.5,
        "actor_logps": array("d", [-1.0, -2.0]),
    }
    with pytest.raises(DataError, match=match):
        PackedSAWItem.from_arrays(**(values | arguments))
