"""tf.train.Example against TensorFlow: messages TensorFlow builds parse to its
values, and messages built here equal TensorFlow's bytes and parse in TensorFlow.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import math
import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import make_example, parse_example, parse_sequence_example, read_records

from .common import (
    COMPRESSION_IDS,
    COMPRESSIONS,
    assert_features_equal,
    assert_values_equal,
    f32,
    i64,
    our_write,
    tf_example,
    tf_values,
    tf_write,
)

# OUR_ROWS holds a float64 too large for float32: numpy warns as it casts it to inf.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")


# --------------------------------------------------------------------------- Example: TF writes, we parse

TF_EXAMPLE_VALUES = {
    "int_extremes": i64([-1, -(2**63), 0, 2**63 - 1, 7, -123456789012]),
    "int_single": i64([42]),
    "int_many": i64(np.arange(-500, 500)),
    "float_special": f32([math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-45, 3.4028235e38, 0.1, -2.5]),
    "float_single": f32([1.0]),
    "bytes_mixed": [b"", b"\xff\xfe\x00binary\x80", "héllo wörld".encode(), b"\x00" * 5],
    "bytes_single_empty": [b""],
    "bytes_many": [bytes([i]) * i for i in range(50)],
    "empty_int64": i64([]),
    "empty_float": f32([]),
    "empty_bytes": [],  # an empty bytes_list decodes to [] as well
    "ключ with space/and:punct": i64([1]),
}


def tf_example_with_no_kind():
    message = tf_example(TF_EXAMPLE_VALUES)
    # An explicitly empty bytes_list (kind set, no values) and a feature with no kind.
    message.features.feature["empty_bytes"].CopyFrom(
        tf.train.Feature(bytes_list=tf.train.BytesList(value=[])))
    message.features.feature["no_kind"].CopyFrom(tf.train.Feature())
    return message


def test_parse_tf_example():
    message = tf_example_with_no_kind()
    assert message.features.feature["empty_bytes"].WhichOneof("kind") == "bytes_list"
    assert message.features.feature["no_kind"].WhichOneof("kind") is None
    want = dict(TF_EXAMPLE_VALUES, no_kind=[])
    for payload in (message.SerializeToString(), message.SerializeToString(deterministic=True)):
        got = parse_example(payload)
        assert_features_equal(got, want)
        # And the values agree with TensorFlow's own view of the message.
        for key, feature in message.features.feature.items():
            assert_values_equal(got[key], tf_values(feature), key)


def test_parse_tf_example_matches_tf_parser():
    payload = tf_example_with_no_kind().SerializeToString()
    dtypes = {np.dtype(np.int64): tf.int64, np.dtype(np.float32): tf.float32}
    description = {k: tf.io.VarLenFeature(dtypes[v.dtype] if isinstance(v, np.ndarray) else tf.string)
                   for k, v in TF_EXAMPLE_VALUES.items()}
    parsed = tf.io.parse_single_example(payload, description)
    ours = parse_example(payload)
    for key in TF_EXAMPLE_VALUES:
        values = parsed[key].values.numpy()
        if isinstance(ours[key], list):
            assert ours[key] == [bytes(v) for v in values.tolist()], key
        else:
            assert_values_equal(ours[key], values, key)


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_parse_examples_from_tf_file(tmp_path, options, ours):
    rows = [
        {"id": i64([i]), "x": f32(np.linspace(-1, 1, i % 7)), "name": [f"row-{i}".encode()] * (i % 3)}
        for i in range(40)
    ]
    path = tmp_path / "examples.tfrecord"
    tf_write(path, [tf_example(r).SerializeToString() for r in rows], options)
    got = [parse_example(p) for p in read_records(path, compression=ours)]
    assert len(got) == len(rows)
    for g, want in zip(got, rows):
        assert_features_equal(g, want)


def test_parse_tf_empty_example():
    assert parse_example(tf.train.Example().SerializeToString()) == {}
    assert parse_example(b"") == {}
    context, lists = parse_sequence_example(tf.train.SequenceExample().SerializeToString())
    assert context == {} and lists == {}


# --------------------------------------------------------------------------- Example: we write, TF parses

OUR_ROWS = [
    {
        "label": 3,
        "flag": True,
        "vec": np.arange(6, dtype=np.int32).reshape(2, 3),
        "big": np.array([2**63 - 1, -(2**63)], dtype=np.int64),
        "small_uint": np.array([0, 255], dtype=np.uint8),
        "score": 0.1,
        "emb": torch.tensor([0.5, -1.25, 3.0]),
        "name": "héllo",
        "raw": [b"\x00\xff", b""],
    },
    {
        "label": -(2**63),
        "flag": False,
        "vec": np.array([[-1, -2, -3], [4, 5, 6]], dtype=np.int64),
        "big": [2**62, -5],
        "small_uint": np.array([7, 8], dtype=np.uint64),
        "score": np.float64(1e300),  # overflows float32 to inf, as in TensorFlow
        "emb": np.array([], dtype=np.float32),
        "name": b"\xfe\xfd",
        "raw": (b"only",),
    },
    {
        "label": np.int16(9),
        "flag": np.bool_(True),
        "vec": torch.arange(6),
        "big": (0, 1),
        "small_uint": [1, 2],
        "score": np.float32(-0.0),
        "emb": [1.0, 2, np.float16(0.5), float("nan")],
        "name": np.array(["x"]),
        "raw": np.array([b"p", b"q", b"r"]),
    },
]

# What each row means, as TensorFlow values.
OUR_ROWS_EXPECTED = [
    {
        "label": i64([3]), "flag": i64([1]), "vec": i64(np.arange(6)),
        "big": i64([2**63 - 1, -(2**63)]), "small_uint": i64([0, 255]), "score": f32([0.1]),
        "emb": f32([0.5, -1.25, 3.0]), "name": ["héllo".encode()], "raw": [b"\x00\xff", b""],
    },
    {
        "label": i64([-(2**63)]), "flag": i64([0]), "vec": i64([-1, -2, -3, 4, 5, 6]),
        "big": i64([2**62, -5]), "small_uint": i64([7, 8]), "score": f32([math.inf]),
        "emb": f32([]), "name": [b"\xfe\xfd"], "raw": [b"only"],
    },
    {
        "label": i64([9]), "flag": i64([1]), "vec": i64(np.arange(6)), "big": i64([0, 1]),
        "small_uint": i64([1, 2]), "score": f32([-0.0]), "emb": f32([1.0, 2.0, 0.5, math.nan]),
        "name": [b"x"], "raw": [b"p", b"q", b"r"],
    },
]

OUR_ROWS_DESCRIPTION = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "flag": tf.io.FixedLenFeature([], tf.int64),
    "vec": tf.io.FixedLenFeature([6], tf.int64),
    "big": tf.io.FixedLenFeature([2], tf.int64),
    "small_uint": tf.io.FixedLenFeature([2], tf.int64),
    "score": tf.io.FixedLenFeature([], tf.float32),
    "emb": tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64),
    "name": tf.io.FixedLenFeature([], tf.string),
    "raw": tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64),
}


def _tf_parsed_row(parsed: dict, key: str):
    """One parsed TF value as a decoded feature value (1-D)."""
    array = np.asarray(parsed[key].numpy()).reshape(-1)
    if array.dtype.kind in "OS":
        return [bytes(v) for v in array.tolist()]
    return array


def test_make_example_equals_tf_message():
    for row, want in zip(OUR_ROWS, OUR_ROWS_EXPECTED):
        ours = make_example(row)
        reference = tf_example(want)
        assert tf.train.Example.FromString(ours) == reference
        # Byte for byte: deterministic serialization sorts map keys, as ours does.
        assert ours == reference.SerializeToString(deterministic=True)
        assert_features_equal(parse_example(ours), want)


def test_make_example_key_order_does_not_matter():
    row = OUR_ROWS[0]
    reversed_row = dict(reversed(list(row.items())))
    assert make_example(row) == make_example(reversed_row)
    assert make_example(reversed_row) == tf_example(OUR_ROWS_EXPECTED[0]).SerializeToString(
        deterministic=True)


def test_tf_parse_single_example_of_ours():
    for row, want in zip(OUR_ROWS, OUR_ROWS_EXPECTED):
        parsed = tf.io.parse_single_example(make_example(row), OUR_ROWS_DESCRIPTION)
        assert set(parsed) == set(want)
        for key in want:
            assert_values_equal(_tf_parsed_row(parsed, key), want[key], key)


def test_tf_parse_example_batch_of_ours():
    batch = tf.constant([make_example(r) for r in OUR_ROWS])
    parsed = tf.io.parse_example(batch, OUR_ROWS_DESCRIPTION)
    for i, want in enumerate(OUR_ROWS_EXPECTED):
        for key in want:
            value = parsed[key][i]
            array = np.asarray(value.numpy()).reshape(-1)
            got = [bytes(v) for v in array.tolist()] if array.dtype.kind in "OS" else array
            assert_values_equal(got, want[key], f"row {i} {key}")


def test_tf_reads_our_example_file(tmp_path):
    path = tmp_path / "rows.tfrecord.gz"
    our_write(path, [make_example(r) for r in OUR_ROWS], "gzip")
    dataset = tf.data.TFRecordDataset(str(path), compression_type="GZIP").map(
        lambda s: tf.io.parse_single_example(s, OUR_ROWS_DESCRIPTION))
    rows = list(dataset)
    assert len(rows) == len(OUR_ROWS_EXPECTED)
    for parsed, want in zip(rows, OUR_ROWS_EXPECTED):
        for key in want:
            assert_values_equal(_tf_parsed_row(parsed, key), want[key], key)


def test_make_example_empty_arrays_keep_their_kind():
    ours = make_example({"i": np.zeros(0, np.int64), "f": np.zeros(0, np.float32)})
    message = tf.train.Example.FromString(ours)
    assert message.features.feature["i"].WhichOneof("kind") == "int64_list"
    assert message.features.feature["f"].WhichOneof("kind") == "float_list"
    assert ours == tf_example({"i": i64([]), "f": f32([])}).SerializeToString(deterministic=True)
    parsed = tf.io.parse_single_example(ours, {"i": tf.io.VarLenFeature(tf.int64),
                                               "f": tf.io.VarLenFeature(tf.float32)})
    assert parsed["i"].values.shape == (0,) and parsed["f"].values.shape == (0,)


def _feature_values():
    ints = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=8).map(i64)
    floats = st.lists(st.floats(width=32), min_size=1, max_size=8).map(f32)
    blobs = st.lists(st.binary(max_size=20), min_size=1, max_size=5)
    return st.one_of(ints, floats, blobs)


@settings(max_examples=60, deadline=None)
@given(features=st.dictionaries(st.text(max_size=12), _feature_values(), min_size=1, max_size=6))
def test_property_example_matches_tf(features):
    reference = tf_example(features)
    ours = make_example(features)
    assert ours == reference.SerializeToString(deterministic=True)
    assert tf.train.Example.FromString(ours) == reference
    assert_features_equal(parse_example(reference.SerializeToString()), features)


def test_empty_example():
    """An empty mapping gives an Example with no features field set; TensorFlow's
    Example(features=Features()) sets it, empty. Both mean the same to parsers."""
    ours = make_example({})
    assert ours == tf.train.Example().SerializeToString() == b""
    assert tf.train.Example.FromString(ours) == tf.train.Example()
    explicit = tf.train.Example(features=tf.train.Features(feature={})).SerializeToString()
    assert parse_example(explicit) == parse_example(ours) == {}
    assert tf.io.parse_single_example(ours, {"x": tf.io.VarLenFeature(tf.int64)})["x"].values.shape == (0,)
