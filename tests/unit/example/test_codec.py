"""make_example / parse_example and their SequenceExample pair: values and kinds,
numpy and torch inputs, deterministic bytes, errors naming the key, round trips."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import (
    ExampleDecodeError,
    make_example,
    make_sequence_example,
    parse_example,
    parse_sequence_example,
)
from tfrecord_torch.example.protos import Example


def test_values_and_kinds():
    out = parse_example(make_example({
        "i": 3, "ints": [1, -2, 2**63 - 1, -(2**63)], "b": True,
        "f": 1.5, "floats": [0.5, 2],
        "s": "héllo", "raw": b"\xff\x00", "many": [b"a", "bc", b""],
    }))
    assert out["i"].dtype == np.int64 and out["i"].tolist() == [3]
    assert out["ints"].tolist() == [1, -2, 2**63 - 1, -(2**63)]
    assert out["b"].tolist() == [1]
    assert out["f"].dtype == np.float32 and out["f"].tolist() == [1.5]
    assert out["floats"].tolist() == [0.5, 2.0]
    assert out["s"] == ["héllo".encode()]
    assert out["raw"] == [b"\xff\x00"]
    assert out["many"] == [b"a", b"bc", b""]


def test_numpy_and_torch_inputs():
    out = parse_example(make_example({
        "img": np.arange(12, dtype=np.uint8).reshape(3, 4),
        "t": torch.tensor([[1.25, 2.5], [3.0, 4.0]]),
        "ti": torch.tensor(7),
        "scalar": np.float64(0.25),
        "names": np.array(["a", "b"]),
        "empty": np.zeros(0, np.int64),
    }))
    assert out["img"].tolist() == list(range(12))
    assert out["t"].tolist() == [1.25, 2.5, 3.0, 4.0]
    assert out["ti"].tolist() == [7]
    assert out["scalar"].tolist() == [0.25]
    assert out["names"] == [b"a", b"b"]
    assert out["empty"].dtype == np.int64 and out["empty"].size == 0


def test_deterministic_bytes():
    a = make_example({"b": 1, "a": [1.0, 2.0], "c": b"x"})
    b = make_example({"c": b"x", "a": [1.0, 2.0], "b": 1})
    assert a == b


@pytest.mark.parametrize("value, error, match", [
    ([], ValueError, "empty list"),
    (None, TypeError, "cannot encode"),
    ([1, b"x"], TypeError, "mix"),
    (2**63, ValueError, "int64"),
    (np.array([2**64 - 1], np.uint64), ValueError, "int64"),
    (np.array([1 + 2j]), TypeError, "dtype"),
    ({"nested": 1}, TypeError, "cannot encode"),
])
def test_bad_values_name_the_key(value, error, match):
    with pytest.raises(error, match=match) as info:
        make_example({"the_key": value})
    assert "the_key" in str(info.value)


def test_bad_payloads():
    for bad in (b"\xff", b"\x0a\x05abc", b"\x0a\x02\x0a\xff"):
        with pytest.raises(ExampleDecodeError, match="not a valid Example"):
            parse_example(bad)
    assert parse_example(b"") == {}


def test_feature_without_kind_is_empty_list():
    message = Example()
    message.features.feature["nothing"].SetInParent()
    assert parse_example(message.SerializeToString()) == {"nothing": []}


def test_unpacked_repeated_scalars_are_accepted():
    # Int64List.value written unpacked (one tag per value) is valid protobuf.
    def field(number, wire, body):
        return bytes([number << 3 | wire]) + body

    def ld(number, body):
        return field(number, 2, bytes([len(body)]) + body)

    int64_list = field(1, 0, b"\x05") + field(1, 0, b"\x07")
    float_list = field(1, 5, np.float32(1.5).tobytes()) + field(1, 5, np.float32(-2).tobytes())
    entry_i = ld(1, b"i") + ld(2, ld(3, int64_list))
    entry_f = ld(1, b"f") + ld(2, ld(2, float_list))
    payload = ld(1, ld(1, entry_i) + ld(1, entry_f))
    out = parse_example(payload)
    assert out["i"].tolist() == [5, 7]
    assert out["f"].tolist() == [1.5, -2.0]


def test_sequence_example_round_trip():
    payload = make_sequence_example(
        {"id": b"seq-1", "length": 3},
        {"tokens": [[1, 2], [3], np.array([4, 5, 6])], "scores": np.ones((3, 2), np.float32),
         "empty": []})
    context, lists = parse_sequence_example(payload)
    assert context == {"id": [b"seq-1"], "length": context["length"]}
    assert context["length"].tolist() == [3]
    assert [s.tolist() for s in lists["tokens"]] == [[1, 2], [3], [4, 5, 6]]
    assert [s.tolist() for s in lists["scores"]] == [[1.0, 1.0]] * 3
    assert lists["empty"] == []
    with pytest.raises(ExampleDecodeError, match="SequenceExample"):
        parse_sequence_example(b"\x12\x05")


ints = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(width=32, allow_nan=False)
values = st.one_of(
    st.lists(ints, min_size=1, max_size=8),
    st.lists(floats, min_size=1, max_size=8),
    st.lists(st.binary(max_size=20), min_size=1, max_size=4),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=10), values, max_size=6))
def test_property_round_trip(mapping):
    out = parse_example(make_example(mapping))
    assert sorted(out) == sorted(mapping)
    for key, value in mapping.items():
        got = out[key]
        if isinstance(value[0], bytes):
            assert got == value
        elif isinstance(value[0], int):
            assert got.dtype == np.int64 and got.tolist() == value
        else:
            assert got.dtype == np.float32 and got.tolist() == value
    # protobuf's own decoder is the reference for what the bytes mean
    ref = Example.FromString(make_example(mapping))
    assert sorted(ref.features.feature) == sorted(mapping)
