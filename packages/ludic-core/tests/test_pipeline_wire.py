"""The pipeline's binary wire format (no server): exact round trips, sizes, and every refusal naming
the item, the field and the value."""

from __future__ import annotations

import copy
import itertools
import json
import math
import pickle
import random
import struct
from array import array
from typing import Any

import attrs
import msgpack
import numpy as np
import pytest
from core_data_builders import still_packed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_messages import make_item, message

from ludic_core.errors import DataError
from ludic_core.packed_saw import UINT32, PackedSAWItem, packed_arrays
from ludic_core.pipeline import BatchMessage, WireLimits, decode_message, encode_message
from ludic_core.pipeline.columns import check_finite_meta
from ludic_core.pipeline.dump import describe
from ludic_core.pipeline.wire import count_rollouts, encode_parts
from ludic_core.saw import SAWItem

# --- round trips -------------------------------------------------------------------------------------


def test_message_round_trip_is_exact() -> None:
    original = message(4, version=7, batch_index=11)
    payload = encode_message(original)
    assert isinstance(payload, bytes)
    header = msgpack.unpackb(payload)
    assert header["format"] == "ludic.pipeline.batch" and header["wire_version"] == 3
    assert header["policy_version"] == 7 and header["num_rollouts"] == 4
    assert header["actor_id"] == "test-actor" and header["batch_index"] == 11
    decoded = decode_message(payload)
    assert decoded == original  # weights, temperatures, created_at: float64, bit for bit
    assert [item.sampling_temperature for item in decoded.items] == [None, 0.7, None, 0.7]


def _with_meta(item: SAWItem, **changes: Any) -> SAWItem:
    meta = {**item.meta, **changes}
    return attrs.evolve(item, meta={k: v for k, v in meta.items() if v is not _DROP})


_DROP = object()


def test_rollouts_are_counted_by_distinct_id_and_items_without_one_count_alone() -> None:
    ids = ["a", "b", "a", None, _DROP, "b", None, 0]
    items = [_with_meta(make_item(i), rollout_id=rid) for i, rid in enumerate(ids)]
    # a, b, 0, and three items without an id (None twice, missing once)
    assert count_rollouts(items) == 6
    assert count_rollouts(items[:3]) == 2 and count_rollouts([items[3]]) == 1
    sent = BatchMessage(items=tuple(items), actor_id="a", batch_index=0, created_at=0.0)
    assert msgpack.unpackb(encode_message(sent))["num_rollouts"] == 6
    assert decode_message(encode_message(sent)).num_rollouts == 6


@pytest.mark.parametrize(
    ("version", "match"),
    [
        (True, "policy_version must be an int >= 0, got True"),
        (-1, "policy_version must be an int >= 0, got -1"),
        (2.0, "policy_version must be an int >= 0, got 2.0"),
        (None, "policy_version must be an int >= 0, got None"),
        (_DROP, "policy_version must be an int >= 0, got None"),
    ],
)
def test_a_message_refuses_an_item_without_an_int_version_naming_it(version: object, match: str) -> None:
    items = [make_item(0, version=3), _with_meta(make_item(1, version=3), policy_version=version)]
    with pytest.raises(DataError, match=rf"BatchMessage.items\[1\] \(rollout 'r1'\) {match}"):
        BatchMessage(items=tuple(items), actor_id="a", batch_index=0, created_at=0.0)


def test_a_message_takes_versions_of_int_subclasses() -> None:
    class Version(int):
        pass

    items = (make_item(0, version=3), _with_meta(make_item(1), policy_version=Version(2)))
    assert BatchMessage(items=items, actor_id="a", batch_index=0, created_at=0.0).policy_version == 2


def test_logprobs_travel_as_float32_and_everything_else_exactly() -> None:
    logps = [-0.1, -2.302585092994046, -1e-9, -0.0]
    item = SAWItem(
        input_ids=[1, 2, 3, 4, 5],
        action_mask=[0, 1, 1, 1, 1],
        weight=1 / 3,
        meta={"policy_version": 2, "score": 0.1, 7: "int keys stay ints", "nested": {"x": [1.5, None]}},
        actor_logps=logps,
        teacher_logps=[-1.0, -2.0, -3.0, -4.0],
        sampling_temperature=0.123456789,
    )
    sent = BatchMessage(items=(item,), actor_id="a", batch_index=0, created_at=1.0 / 7, meta={"r": 0.3})
    (got,) = (received := decode_message(encode_message(sent))).items
    assert got.actor_logps == tuple(float(np.float32(v)) for v in logps)
    assert max(abs(a - b) for a, b in zip(got.actor_logps, logps, strict=True)) < 2e-7
    assert got.teacher_logps == item.teacher_logps  # float32-exact values come back unchanged
    assert (got.input_ids, got.action_mask) == (item.input_ids, item.action_mask)
    assert got.weight == 1 / 3 and got.sampling_temperature == 0.123456789 and got.meta == item.meta
    assert received.created_at == 1.0 / 7 and received.meta == {"r": 0.3}


@pytest.mark.parametrize(
    ("largest_id", "width"),
    [(255, 1), (256, 2), (65_535, 2), (65_536, 4), (151_643, 4), (2**32 - 1, 4)],
)
def test_token_ids_take_the_narrowest_width_that_holds_them(largest_id: int, width: int) -> None:
    item = SAWItem(
        input_ids=[0, largest_id, 3],
        action_mask=[0, 1, 1],
        weight=1.0,
        meta={"policy_version": 0},
    )
    payload = encode_message(BatchMessage(items=(item,), actor_id="a", batch_index=0, created_at=0.0))
    columns = msgpack.unpackb(payload)["items"]
    assert columns["token_bytes"] == width and len(columns["input_ids"]) == 3 * width
    assert decode_message(payload).items[0].input_ids == (0, largest_id, 3)


def agentic_batch(rng: random.Random, *, items: int = 16, tokens: int = 1024) -> BatchMessage:
    """Like a GRPO batch of a 151k-vocabulary model: 40% action tokens with logprobs, SAW-builder meta."""
    out = []
    for i in range(items):
        actions = int(tokens * 0.4)
        out.append(
            SAWItem(
                input_ids=[rng.randrange(151_643) for _ in range(tokens)],
                action_mask=[0] * (tokens - actions) + [1] * actions,
                weight=rng.gauss(0, 1),
                actor_logps=[math.log(rng.uniform(0.01, 1.0)) for _ in range(actions)],
                meta={
                    "rollout_id": f"r{i // 2}",
                    "group_id": "g0",
                    "turn_index": i % 2,
                    "policy_version": 3,
                    "total_reward": 1.0,
                    "completion_length": actions,
                    "prompt_length": tokens - actions,
                    "finish_reason": "stop",
                    "step_info": {"correct": True},
                },
            )
        )
    return BatchMessage(items=tuple(out), actor_id="host:1:abc", batch_index=0, created_at=1.7e9)


def test_a_1k_token_batch_takes_under_10_bytes_per_token() -> None:
    batch = agentic_batch(random.Random(0))
    payload = encode_message(batch)
    per_token = len(payload) / (16 * 1024)
    # 4 bytes per id + 0.4 x 4 bytes of logprobs + run lengths + ~200 bytes of meta per item.
    assert 5.6 < per_token < 6.2, per_token
    assert decode_message(payload).items[5].input_ids == batch.items[5].input_ids


def test_masks_with_several_spans_round_trip() -> None:
    item = SAWItem(
        input_ids=list(range(10)),
        action_mask=[0, 0, 0, 1, 1, 0, 0, 1, 1, 1],  # two turns' completions
        weight=-1.0,
        meta={"policy_version": 1},
        actor_logps=[-1.0] * 5,
    )
    no_actions = SAWItem(input_ids=[9], action_mask=[0], weight=0.0, meta={"policy_version": 1})
    sent = BatchMessage(items=(item, no_actions), actor_id="a", batch_index=0, created_at=0.0)
    columns = msgpack.unpackb(encode_message(sent))["items"]
    assert columns["action_runs"] == [[3, 2, 2, 3], [1]]
    assert "attention_runs" not in columns  # items hold real tokens only: nothing to mask
    assert decode_message(encode_message(sent)) == sent


# Logprobs drawn as float32 values, so the round trip must be exact (the float32 rounding itself is
# tested above); everything else at full float64 range.
_ids = st.integers(0, 2**32 - 1) | st.integers(0, 255) | st.integers(0, 65_535)
_logp = st.floats(min_value=-1e4, max_value=0.0, width=32)
_meta_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def saw_items(draw: st.DrawFn, logp: st.SearchStrategy[float] = _logp) -> SAWItem:
    n = draw(st.integers(1, 40))
    action_mask = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    ones = sum(action_mask)
    logps = st.none() | st.lists(logp, min_size=ones, max_size=ones)
    return SAWItem(
        input_ids=draw(st.lists(_ids, min_size=n, max_size=n)),
        action_mask=action_mask,
        weight=draw(st.floats(allow_nan=False, allow_infinity=False)),
        meta={
            **draw(st.dictionaries(st.text(max_size=6), _meta_value, max_size=4)),
            "policy_version": draw(st.integers(0, 10**6)),
        },
        actor_logps=draw(logps),
        teacher_logps=draw(logps),
        sampling_temperature=draw(st.none() | st.floats(0.0, 10.0)),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(saw_items(), min_size=1, max_size=5),
    batch_meta=st.dictionaries(st.text(max_size=6), _meta_value, max_size=4),
    created_at=st.floats(allow_nan=False, allow_infinity=False),
)
def test_round_trip_property(items: list[SAWItem], batch_meta: dict[str, Any], created_at: float) -> None:
    sent = BatchMessage(
        items=tuple(items), actor_id="a:1", batch_index=3, created_at=created_at, meta=batch_meta
    )
    received = decode_message(encode_message(sent))
    assert received == sent
    # Decoded items skip SAWItem's per-element validators; they must pass them all the same.
    for item in received.items:
        assert SAWItem.from_dict(item.to_dict()) == item
        assert all(type(v) is int for v in item.input_ids + item.action_mask)
        assert item.actor_logps is None or all(type(v) is float for v in item.actor_logps)


# --- decoded items: arrays unpacked on first read -----------------------------------------------------


def test_decoded_items_unpack_each_array_on_its_first_read() -> None:
    sent = message(3)
    item = decode_message(encode_message(sent)).items[1]
    arrays = ("input_ids", "action_mask", "actor_logps")
    assert isinstance(item, PackedSAWItem) and all(still_packed(item, field) for field in arrays)
    # The counts a batcher asks for come from the packed lengths and runs, without unpacking.
    assert len(item) == 4 and item.num_action_tokens == 2
    assert all(still_packed(item, field) for field in arrays) and item.teacher_logps is None
    ids = item.input_ids
    assert ids == (5, 6, 8, 8) and type(ids) is tuple and all(type(v) is int for v in ids)
    assert item.input_ids is ids  # kept: unpacked once
    assert not still_packed(item, "input_ids") and still_packed(item, "action_mask")
    assert item.action_mask == (0, 0, 1, 1) and item.actor_logps == (-0.5, -1.375)


def test_decoded_items_behave_as_the_items_sent() -> None:
    sent = message(3)
    received = decode_message(encode_message(sent)).items
    for original, item in zip(sent.items, received, strict=True):
        # Equal in both directions (attrs' own __eq__ compares one class only), unequal when a field is.
        assert item == original and original == item
        assert (item != original, original != item) == (False, False)
        assert item != attrs.evolve(original, weight=original.weight + 1)
        assert repr(item).endswith(repr(original).removeprefix("SAWItem"))
        assert item.to_dict() == original.to_dict()
    fresh = decode_message(encode_message(sent)).items[2]
    # evolve, copy and pickle set every field, as SAWItem.__init__ does (with its validators).
    evolved = attrs.evolve(fresh, meta={**fresh.meta, "tag": 1})
    assert evolved.input_ids == (5, 6, 9, 8) and evolved.meta["tag"] == 1 and len(evolved) == 4
    with pytest.raises(DataError, match="action_mask has length 3"):
        attrs.evolve(fresh, action_mask=(0, 1, 1))
    assert copy.copy(fresh) == sent.items[2] and copy.deepcopy(fresh) == sent.items[2]
    assert pickle.loads(pickle.dumps(decode_message(encode_message(sent)).items[2])) == sent.items[2]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fresh.weight = 2.0  # type: ignore[misc]


def test_a_decoded_message_encodes_to_the_same_bytes() -> None:
    # The learner re-encodes a message it dead-letters; untouched decoded items pack as they came.
    payload = encode_message(message(3, version=2))
    assert encode_message(decode_message(payload)) == payload


# --- items packed at build time -----------------------------------------------------------------------


def _float32(values: tuple[float, ...] | None) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(np.float32(v)) for v in values)


def as_built(item: SAWItem) -> PackedSAWItem:
    """The item of the same values as the SAW builder builds it: arrays packed once."""
    runs = [len(list(group)) for _, group in itertools.groupby(item.action_mask)]
    return PackedSAWItem.from_arrays(
        input_ids=array(UINT32, item.input_ids),
        action_runs=[0, *runs] if item.action_mask[0] == 1 else runs,
        weight=item.weight,
        meta=item.meta,
        actor_logps=None if item.actor_logps is None else array("d", item.actor_logps),
        teacher_logps=None if item.teacher_logps is None else array("d", item.teacher_logps),
        sampling_temperature=item.sampling_temperature,
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    # float64 logprobs: the packed path rounds them to float32 as struct does, on every value.
    items=st.lists(saw_items(logp=st.floats(min_value=-1e30, max_value=0.0)), min_size=1, max_size=5),
    built=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_items_packed_at_build_time_encode_to_the_same_bytes(items: list[SAWItem], built: list[bool]) -> None:
    def encode(batch: list[SAWItem]) -> bytes:
        return encode_message(BatchMessage(items=tuple(batch), actor_id="a", batch_index=0, created_at=1.0))

    all_built = [as_built(item) for item in items]
    payload = encode(all_built)
    # pack_items read the packed buffers: no item's arrays were unpacked into tuples.
    for item in all_built:
        has = ("input_ids", "action_mask", *packed_arrays(item).logps)  # type: ignore[union-attr]
        assert all(still_packed(item, field) for field in has)
    mixed = [as_built(item) if flag else item for item, flag in zip(items, built, strict=False)]
    evolved = [attrs.evolve(item) for item in all_built]  # tuples again: packed the tuple way
    assert encode(items) == payload and encode(mixed) == payload and encode(evolved) == payload
    for got, item in zip(decode_message(payload).items, items, strict=True):
        assert got == attrs.evolve(
            item, actor_logps=_float32(item.actor_logps), teacher_logps=_float32(item.teacher_logps)
        )


def built_item(logps: list[float], meta: dict[str, Any] | None = None) -> PackedSAWItem:
    return PackedSAWItem.from_arrays(
        input_ids=array(UINT32, [5, 6, 7, 8]),
        action_runs=[2, 2],
        weight=0.5,
        meta=meta or {"rollout_id": "r0", "policy_version": 0},
        actor_logps=array("d", logps),
    )


@pytest.mark.parametrize(
    ("items", "match"),
    [
        (
            [built_item([-0.5, math.nan])],
            r"items\[0\] \(rollout 'r0'\): actor_logps\[1\] = nan is not finite",
        ),
        (
            [make_item(1), built_item([-0.5, 3.0])],
            r"items\[1\] \(rollout 'r0'\): actor_logps\[1\] = 3.0 is > 0",
        ),
        (
            [make_item(1), built_item([-1e300, -0.5])],
            r"items\[1\] \(rollout 'r0'\): actor_logps\[0\] = -1e\+300 cannot be packed as float32",
        ),
        (
            [built_item([-0.5, -math.inf])],
            r"items\[0\] \(rollout 'r0'\): actor_logps\[1\] = -inf is not finite",
        ),
        (
            [built_item([-0.5, -1.0], {"policy_version": 0, "info": {"x": [math.inf]}})],
            r"items\[0\]: meta\['info'\]\['x'\]\[0\] is not finite",
        ),
    ],
    ids=["logp-nan", "logp-positive", "logp-overflow", "logp-minus-inf", "item-meta-inf"],
)
def test_encode_refuses_built_items_naming_item_field_and_value(items: list[SAWItem], match: str) -> None:
    batch = BatchMessage(items=tuple(items), actor_id="a", batch_index=0, created_at=0.0)
    with pytest.raises(DataError, match=match):
        encode_message(batch)


def test_a_float64_logprob_that_rounds_to_the_largest_float32_is_packed_as_struct_packs_it() -> None:
    # Checked before rounding, a logprob just beyond float32's range is not refused: it rounds to a
    # finite float32, as struct rounds it.
    largest = float(np.finfo(np.float32).max)
    beyond = float(np.nextafter(-largest, -math.inf))
    assert struct.unpack("<f", struct.pack("<f", beyond)) == (-largest,)
    sent = BatchMessage(items=(built_item([beyond, -0.5]),), actor_id="a", batch_index=0, created_at=0.0)
    assert decode_message(encode_message(sent)).items[0].actor_logps == (-largest, -0.5)


def test_encoded_parts_are_the_message_bytes_unjoined() -> None:
    sent = message(3, version=2)
    encoded = encode_parts(sent)
    assert b"".join(encoded.parts) == encode_message(sent) and encoded.size == len(encode_message(sent))
    assert decode_message(b"".join(encoded.parts)) == sent
    with pytest.raises(DataError, match=r"over WireLimits\.max_message_bytes"):
        encode_parts(sent, WireLimits(max_message_bytes=encoded.size - 1))


# --- refusals ---------------------------------------------------------------------------------------


def tampered(change: Any, base: BatchMessage | None = None) -> bytes:
    """A message whose decoded map ``change(data)`` edited in place, packed again."""
    data = msgpack.unpackb(encode_message(base or message(3)), strict_map_key=False)
    change(data)
    return msgpack.packb(data)


def _set(path: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = data
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return change


def _logps_bytes(values: list[float]) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


_ITEMS_LOGPS = [-0.5, -1.25, -0.5, -1.375, -0.5, -1.5]  # message(3)'s actor_logps, concatenated


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"not msgpack at all", "not valid msgpack"),
        (pickle.dumps({"items": []}), "not valid msgpack"),  # pickle is refused, never loaded
        (msgpack.packb([1, 2]), "must be a msgpack map"),
        (msgpack.packb({"format": "other"}), "not a Ludic pipeline message"),
        (tampered(_set("wire_version", 2)), "wire_version 2 is not supported"),
        (
            json.dumps({"format": "ludic.pipeline.batch", "wire_version": 1, "items": []}).encode(),
            r"wire_version 1 \(JSON\) is not supported.*older Ludic",
        ),
        (tampered(lambda d: d.pop("items")), "header 'items' is missing"),
        (tampered(lambda d: d["items"].pop("weights")), "items column 'weights' is missing"),
        (tampered(_set("policy_version", 9)), "header policy_version=9 disagrees"),
        (tampered(_set("items.schema_version", 2)), "SAWItem schema_version 2 is not supported"),
        (tampered(_set("items.token_bytes", 3)), "'token_bytes' must be 1, 2 or 4, got 3"),
        (tampered(_set("items.lengths.1", 0)), r"'lengths' must hold ints >= 1"),
        (tampered(_set("items.input_ids", b"\x01" * 7)), "'input_ids' holds 7 bytes; 12 tokens"),
        (tampered(_set("items.weights", [1.0])), "'weights' has 1 entries for 3 items"),
        (
            tampered(_set("items.action_runs.2", [2, 3])),
            r"items\[2\] \(rollout 'r2'\): action_mask runs cover 5 tokens, input_ids has 4",
        ),
        (
            tampered(_set("items.action_runs.0", [-1, 5])),
            r"items\[0\] \(rollout 'r0'\): action_mask runs must be a list of run lengths",
        ),
        (
            tampered(_set("items.weights.1", math.inf)),
            r"items\[1\] \(rollout 'r1'\): weight must be a finite",
        ),
        (
            tampered(_set("items.sampling_temperatures.0", -0.5)),
            r"items\[0\] \(rollout 'r0'\): sampling_temperature must be a finite number >= 0.0, got -0.5",
        ),
        (tampered(_set("items.metas.1", [1])), r"items\[1\]: meta must be a map, got list"),
        (
            tampered(_set("items.actor_logps", _logps_bytes(_ITEMS_LOGPS[:-1]))),
            "'actor_logps' holds 20 bytes; .* need 24",
        ),
        (
            tampered(
                _set("items.actor_logps", _logps_bytes([*_ITEMS_LOGPS[:3], math.nan, *_ITEMS_LOGPS[4:]]))
            ),
            r"items\[1\] \(rollout 'r1'\): actor_logps\[1\] = nan is not finite",
        ),
        (
            tampered(_set("items.actor_logps", _logps_bytes([*_ITEMS_LOGPS[:4], 0.25, *_ITEMS_LOGPS[5:]]))),
            r"items\[2\] \(rollout 'r2'\): actor_logps\[0\] = 0.25 is > 0",
        ),
        (
            tampered(_set("items.actor_logps_present", [True, 1, True])),
            "'actor_logps_present' must hold booleans",
        ),
        (
            tampered(lambda d: d["items"]["metas"][0].pop("policy_version")),
            r"items\[0\].*policy_version must be an int >= 0, got None",
        ),
        (
            tampered(_set("items.metas.2.step_info", {"score": [1.0, math.nan]})),
            r"items\[2\] \(rollout 'r2'\): meta\['step_info'\]\['score'\]\[1\] is not finite",
        ),
        (tampered(_set("meta.avg_reward", math.inf)), r"batch meta\['avg_reward'\] is not finite"),
        (tampered(_set("meta", [1, 2])), "the batch meta must be a map, got list"),
        (
            tampered(_set("meta.log", "x" * (2**20 + 1))),
            r"the batch meta is \d+ bytes, over WireLimits.max_meta_bytes=1048576",
        ),
    ],
    ids=[
        "garbage",
        "pickle",
        "array",
        "format",
        "wire-version",
        "json-v1",
        "no-items",
        "no-column",
        "header",
        "schema",
        "token-width",
        "empty-item",
        "ids-size",
        "column-count",
        "action-runs",
        "attention-runs",
        "weight",
        "temperature",
        "meta",
        "logps-size",
        "logp-nan",
        "logp-positive",
        "logps-present",
        "no-version",
        "item-meta-nan",
        "batch-meta-inf",
        "batch-meta-list",
        "batch-meta-size",
    ],
)
def test_decode_refuses_malformed_messages_naming_what_is_wrong(raw: bytes, match: str) -> None:
    with pytest.raises(DataError, match=match) as info:
        decode_message(raw)
    assert f"({len(raw)} bytes)" in str(info.value)  # the excerpt names the message size


def forced(item: SAWItem, **values: Any) -> SAWItem:
    """An item holding values its validators refuse (as a bug or a hand-made item can)."""
    for name, value in values.items():
        object.__setattr__(item, name, value)
    return item


@pytest.mark.parametrize(
    ("items", "batch_meta", "match"),
    [
        (
            [forced(make_item(1), actor_logps=(-0.5, math.nan))],
            {},
            r"items\[0\].*actor_logps\[1\] = nan is not finite",
        ),
        (
            [make_item(0), forced(make_item(1), actor_logps=(-0.5, 3.0))],
            {},
            r"items\[1\].*actor_logps\[1\] = 3.0 is > 0",
        ),
        (
            [forced(make_item(0), actor_logps=(-0.5, -1e300))],
            {},
            r"items\[0\].*actor_logps cannot be packed as float32",
        ),
        (
            [forced(make_item(0), actor_logps=(-0.5,))],
            {},
            r"items\[0\].*actor_logps has 1 entries but action_mask has 2",
        ),
        ([forced(make_item(0), input_ids=(5, -1, 7, 8))], {}, r"items\[0\].*input_ids holds -1"),
        ([forced(make_item(0), input_ids=(5, 2**32, 7, 8))], {}, r"input_ids holds 4294967296"),
        (
            [forced(make_item(0), action_mask=(0, 2, 1, 1))],
            {},
            r"action_mask must hold only 0/1; got 2 at position 1",
        ),
        (
            [forced(make_item(0), action_mask=(1, 1, 1))],
            {},
            r"action_mask has length 3, input_ids has 4",
        ),
        ([forced(make_item(0), weight=math.nan)], {}, r"items\[0\].*weight must be a finite number, got nan"),
        (
            [forced(make_item(0), meta={"policy_version": 0, "info": {"score": math.inf}})],
            {},
            r"meta\['info'\]\['score'\] is not finite",
        ),
        ([make_item(0)], {"avg": [1.0, math.nan]}, r"batch meta\['avg'\]\[1\] is not finite"),
        ([make_item(0)], {"thing": object()}, "cannot be packed"),
    ],
    ids=[
        "logp-nan",
        "logp-positive",
        "logp-overflow",
        "logps-length",
        "negative-id",
        "id-too-large",
        "mask-value",
        "mask-length",
        "weight",
        "item-meta-nan",
        "batch-meta-nan",
        "unpackable-meta",
    ],
)
def test_encode_refuses_what_a_reader_would_refuse(
    items: list[SAWItem], batch_meta: dict[str, Any], match: str
) -> None:
    batch = BatchMessage(items=tuple(items), actor_id="a", batch_index=0, created_at=0.0, meta=batch_meta)
    with pytest.raises(DataError, match=match):
        encode_message(batch)


def test_a_logprob_within_the_guards_tolerance_of_zero_is_accepted() -> None:
    # Samplers return e.g. +1e-7 for a certain token (rounding); the trainer's guards allow 1e-4.
    item = forced(make_item(0), actor_logps=(1e-7, -0.5))
    received = decode_message(
        encode_message(BatchMessage(items=(item,), actor_id="a", batch_index=0, created_at=0.0))
    )
    assert received.items[0].actor_logps == (float(np.float32(1e-7)), -0.5)


def test_dump_describes_messages_and_refusals() -> None:
    view = describe(encode_message(message(2, version=4)), tokens=True)
    assert view["policy_version"] == 4 and view["num_rollouts"] == 2 and view["actor_id"] == "test-actor"
    first = view["items"][0]
    assert first["tokens"] == 4 and first["action_tokens"] == 2 and first["input_ids"] == (5, 6, 7, 8)
    assert first["meta"]["rollout_id"] == "r0" and first["actor_logps"] == (-0.5, -1.25)
    json.dumps(view)  # printable as it is
    assert "input_ids" not in describe(encode_message(message(1)))["items"][0]
    broken = describe(b"\x92\x01\x02")  # the array [1, 2]
    assert "must be a msgpack map" in broken["error"] and broken["bytes"] == 3


def test_sizes_over_the_wire_limits_are_refused_on_both_sides() -> None:
    raw = encode_message(message(3))
    small = WireLimits(max_message_bytes=len(raw) - 1)
    with pytest.raises(
        DataError, match=rf"is {len(raw)} bytes, over WireLimits.max_message_bytes={len(raw) - 1}"
    ):
        encode_message(message(3), small)
    with pytest.raises(
        DataError, match=rf"the message is {len(raw)} bytes, over WireLimits.max_message_bytes"
    ):
        decode_message(raw, small)
    assert decode_message(raw, WireLimits(max_message_bytes=len(raw))).items == message(3).items
    big_meta = attrs.evolve(message(3), meta={"log": "x" * 100})
    with pytest.raises(DataError, match=r"the batch meta is 107 bytes, over WireLimits\.max_meta_bytes=100"):
        encode_message(big_meta, WireLimits(max_meta_bytes=100))


@pytest.mark.parametrize("value", [0, -1, 1.5, True, None])
def test_wire_limits_name_a_bad_value(value: object) -> None:
    with pytest.raises(DataError, match=rf"WireLimits.max_meta_bytes must be an int >= 1, got {value!r}"):
        WireLimits(max_meta_bytes=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (math.nan, "['x']"),
        (np.float64("-inf"), "['x']"),  # a float subclass
        ([(1.5, -math.inf)], "['x'][0][1]"),
        ({"score": {3: math.inf}}, "['x']['score'][3]"),
    ],
    ids=["nan", "numpy-inf", "in-a-tuple", "int-key"],
)
def test_meta_check_finds_every_non_finite_float_and_only_those(value: Any, path: str) -> None:
    # Bytes that look like a packed NaN (a bin value, an int's own bytes) are no NaN: still accepted.
    meta = {"policy_version": 0, "blob": b"\xcb\x7f\xf8" + bytes(6), "n": 0xCB7FF8, "ok": [1.0, -2.5]}
    check_finite_meta(meta, "meta")
    with pytest.raises(DataError) as info:
        check_finite_meta({**meta, "x": value}, "meta")
    assert str(info.value) == f"meta{path} is not finite"
