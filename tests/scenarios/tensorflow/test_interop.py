"""Interoperability with TensorFlow, which serves as the oracle.

TensorFlow writes files and messages that tfrecord_torch must read exactly, and
reads the files and messages tfrecord_torch writes. TensorFlow is imported
unconditionally: the test environment always has it, and a missing TensorFlow
must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import zlib
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_torch
from tfrecord_torch import (
    CorruptRecordError,
    IndexedReader,
    RecordWriter,
    TFRecordError,
    build_index,
    load_index,
    make_example,
    make_sequence_example,
    parse_example,
    parse_sequence_example,
    read_records,
)

ROOT = Path(__file__).resolve().parents[3]
OVERHEAD = 16  # framing bytes around each payload
HEADER = 12

# TensorFlow's option string <-> our compression argument.
COMPRESSIONS = [(None, None), ("GZIP", "gzip"), ("ZLIB", "zlib")]
COMPRESSION_IDS = ["plain", "gzip", "zlib"]

# OUR_ROWS holds a float64 too large for float32: numpy warns as it casts it to inf.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")

HYPOTHESIS = settings(max_examples=30, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- helpers


def tf_write(path, payloads, options=None) -> None:
    with tf.io.TFRecordWriter(str(path), options=options) as writer:
        for payload in payloads:
            writer.write(payload)


def tf_read(path, options=None) -> list[bytes]:
    dataset = tf.data.TFRecordDataset(str(path), compression_type=options or "")
    return [bytes(r) for r in dataset.as_numpy_iterator()]


def our_write(path, payloads, compression=None) -> None:
    with RecordWriter(path, compression=compression) as writer:
        for payload in payloads:
            writer.write(payload)


def header_offsets(payloads) -> list[int]:
    """Byte offset of each record's header in the (decompressed) stream."""
    sizes = [len(p) + OVERHEAD for p in payloads]
    return [int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]])] if sizes else []


def mixed_payloads() -> list[bytes]:
    """Payloads that exercise every path of the reader.

    Zero-length records (alone and in a run), runs of equal-length records (the
    vectorised path), records that straddle the reader's 1 MiB blocks, one of
    300 KB (read on its own) and one of 2 MB (larger than a block).
    """
    rng = np.random.default_rng(20240611)
    out = [b"", b"a", b""]
    out += [rng.bytes(40) for _ in range(20)]  # equal headers: numpy fast path
    out += [b""] * 10  # a run of empty records
    out += [rng.bytes(int(n)) for n in rng.integers(0, 5000, 30)]
    out.append(rng.bytes(300 * 1024))
    out += [rng.bytes(200_000) for _ in range(6)]  # straddle block boundaries
    out.append(rng.bytes(2 * 1024 * 1024))
    out.append(b"")
    out += [rng.bytes(40) for _ in range(9)]
    out.append(b"last record")
    return out


PAYLOADS = mixed_payloads()
BIG = PAYLOADS.index(max(PAYLOADS, key=len))  # the 2 MB record
RUN = 3 + 12  # a record inside the run of 20 equal-length records


def assert_values_equal(got, want, where=""):
    """Exact equality of one decoded feature value, dtype and float bits included."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), (where, got)
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        assert got.shape == want.shape, (where, got.shape, want.shape)
        if want.dtype == np.float32:
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=where)
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        assert isinstance(got, list), (where, got)
        assert got == want, where
        assert all(type(v) is bytes for v in got), where


def assert_features_equal(got: dict, want: dict):
    assert set(got) == set(want)
    for key, value in want.items():
        assert_values_equal(got[key], value, key)


def i64(values):
    return np.array(values, dtype=np.int64)


def f32(values):
    return np.array(values, dtype=np.float32)


def tf_feature(value):
    """A tf.train.Feature from an expected decoded value."""
    if isinstance(value, np.ndarray) and value.dtype == np.int64:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
    if value == []:
        return tf.train.Feature()
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=value))


def tf_example(expected: dict):
    return tf.train.Example(features=tf.train.Features(
        feature={k: tf_feature(v) for k, v in expected.items()}))


def tf_values(feature) -> object:
    """The values of a TensorFlow Feature message, decoded the way we decode."""
    kind = feature.WhichOneof("kind")
    if kind == "int64_list":
        return i64(list(feature.int64_list.value))
    if kind == "float_list":
        return f32(list(feature.float_list.value))
    if kind == "bytes_list":
        return list(feature.bytes_list.value)
    return []


# --------------------------------------------------------------------------- framing: TF writes, we read


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_read_tf_written_file(tmp_path, options, ours):
    path = tmp_path / "data.tfrecord"  # no suffix: "auto" must detect from the bytes
    tf_write(path, PAYLOADS, options)
    assert tf_read(path, options) == PAYLOADS  # the oracle agrees with itself

    auto = list(read_records(path))
    assert len(auto) == len(PAYLOADS)
    assert auto == PAYLOADS
    assert list(read_records(path, compression=ours)) == PAYLOADS
    assert list(read_records(str(path), compression="auto", verify=False)) == PAYLOADS


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_read_tf_written_file_object(tmp_path, options, ours):
    path = tmp_path / "data.tfrecord"
    payloads = PAYLOADS[:40] + [PAYLOADS[BIG]]
    tf_write(path, payloads, options)
    with open(path, "rb") as f:
        assert list(read_records(f)) == payloads
    with open(path, "rb", buffering=0) as f:
        assert list(read_records(f, compression=ours)) == payloads
    # A file object positioned after some leading bytes is read from there on.
    blob = io.BytesIO(b"junk" + path.read_bytes())
    blob.seek(4)
    assert list(read_records(blob, compression=ours)) == payloads
    # A stream that offers nothing but read().
    assert list(read_records(_ReadOnly(path.read_bytes()), compression=ours)) == payloads


class _ReadOnly:
    """A non-seekable binary stream."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, n=-1) -> bytes:
        return self._data.read(n)


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_read_tf_written_empty_file(tmp_path, options, ours):
    path = tmp_path / "empty.tfrecord"
    with tf.io.TFRecordWriter(str(path), options=options):
        pass
    assert tf_read(path, options) == []
    if options is not None:
        assert path.stat().st_size > 0  # a compressed empty stream still has a header
    assert list(read_records(path)) == []
    assert list(read_records(path, compression=ours)) == []


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_read_tf_written_only_empty_records(tmp_path, options, ours):
    path = tmp_path / "zeros.tfrecord"
    tf_write(path, [b""] * 25, options)
    assert list(read_records(path)) == [b""] * 25
    assert list(read_records(path, compression=ours)) == [b""] * 25


@st.composite
def payload_lists(draw):
    """Lists of payloads with some runs of equal-length records in them."""
    parts = draw(st.lists(st.one_of(
        st.lists(st.binary(max_size=300), max_size=6),
        st.integers(0, 64).flatmap(
            lambda n: st.lists(st.binary(min_size=n, max_size=n), min_size=1, max_size=25)),
    ), max_size=6))
    return [p for part in parts for p in part]


@HYPOTHESIS
@given(payloads=payload_lists(), compression=st.sampled_from(COMPRESSIONS))
def test_property_we_read_what_tf_writes(payloads, compression):
    options, ours = compression
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "data.tfrecord")
        tf_write(path, payloads, options)
        assert list(read_records(path)) == payloads
        assert list(read_records(path, compression=ours)) == payloads


# --------------------------------------------------------------------------- framing: we write, TF reads


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_tf_reads_our_file(tmp_path, options, ours):
    path = tmp_path / "ours.tfrecord"
    our_write(path, PAYLOADS, ours)
    assert tf_read(path, options) == PAYLOADS
    assert list(read_records(path)) == PAYLOADS


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_tf_reads_our_empty_file(tmp_path, options, ours):
    path = tmp_path / "empty.tfrecord"
    with RecordWriter(path, compression=ours):
        pass
    assert path.exists()
    assert tf_read(path, options) == []


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_tf_reads_what_we_write_to_a_file_object(tmp_path, options, ours):
    path = tmp_path / "ours.tfrecord"
    payloads = [b"", b"x" * 1000, bytes(range(256)), b""]
    with open(path, "wb") as f, RecordWriter(f, compression=ours) as writer:
        offsets = [writer.write(p) for p in payloads]
    assert offsets == header_offsets(payloads)
    assert tf_read(path, options) == payloads


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS, ids=COMPRESSION_IDS)
def test_plain_file_bytes_equal_tf(tmp_path, options, ours):
    """Uncompressed framing is fully determined, so the files are identical;
    compressed ones must at least decompress to the same stream."""
    a, b = tmp_path / "tf.tfrecord", tmp_path / "ours.tfrecord"
    payloads = PAYLOADS[:60]
    tf_write(a, payloads, options)
    our_write(b, payloads, ours)
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    if ours == "gzip":
        raw_a, raw_b = gzip.decompress(raw_a), gzip.decompress(raw_b)
    elif ours == "zlib":
        raw_a, raw_b = zlib.decompress(raw_a), zlib.decompress(raw_b)
    assert raw_a == raw_b


@HYPOTHESIS
@given(payloads=payload_lists(), compression=st.sampled_from(COMPRESSIONS))
def test_property_tf_reads_what_we_write(payloads, compression):
    options, ours = compression
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "data.tfrecord")
        our_write(path, payloads, ours)
        assert tf_read(path, options) == payloads


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


def test_parse_tf_sequence_example():
    context = {
        "id": i64([2**63 - 1, -(2**63)]),
        "title": ["заголовок".encode(), b"\xff"],
        "weights": f32([0.25, math.nan, -math.inf]),
        "nothing": [],
    }
    steps = {
        "tokens": [i64([1, 2, 3]), i64([]), i64([-7]), i64(np.arange(100))],
        "frames": [f32([0.5, 1.5]), f32([math.inf, -0.0])],
        "words": [[b"a"], [b"", b"\x00\xff"], []],
        "mixed_kinds": [i64([1]), f32([2.0]), [b"three"], []],
        "empty_list": [],
    }
    message = tf.train.SequenceExample(
        context=tf.train.Features(feature={k: tf_feature(v) for k, v in context.items()}),
        feature_lists=tf.train.FeatureLists(feature_list={
            k: tf.train.FeatureList(feature=[tf_feature(v) for v in vs]) for k, vs in steps.items()
        }),
    )
    # "words" step 2 is an explicitly set, empty bytes_list; decodes to [] as well.
    message.feature_lists.feature_list["words"].feature[2].bytes_list.SetInParent()
    assert message.feature_lists.feature_list["words"].feature[2].WhichOneof("kind") == "bytes_list"

    got_context, got_lists = parse_sequence_example(message.SerializeToString())
    assert_features_equal(got_context, context)
    assert set(got_lists) == set(steps)
    for key, want in steps.items():
        assert len(got_lists[key]) == len(want), key
        for i, (g, w) in enumerate(zip(got_lists[key], want)):
            assert_values_equal(g, w, f"{key}[{i}]")
        tf_steps = message.feature_lists.feature_list[key].feature
        assert len(tf_steps) == len(got_lists[key])
        for g, f in zip(got_lists[key], tf_steps):
            assert_values_equal(g, tf_values(f), key)


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


# --------------------------------------------------------------------------- SequenceExample: we write, TF parses

SEQ_CONTEXT = {"id": 7, "title": "abc", "weights": np.array([0.5, 1.5], np.float32)}
SEQ_LISTS = {
    "frames": np.arange(12, dtype=np.float32).reshape(4, 3),  # one step per row
    "tokens": [[1, 2], [3], np.array([4, 5, 6]), [2**63 - 1]],
    "words": [b"a", [b"b", b"\x00\xff"], "d", [b""]],
    "empty": [],
}
SEQ_CONTEXT_EXPECTED = {"id": i64([7]), "title": [b"abc"], "weights": f32([0.5, 1.5])}
SEQ_LISTS_EXPECTED = {
    "frames": [f32([0, 1, 2]), f32([3, 4, 5]), f32([6, 7, 8]), f32([9, 10, 11])],
    "tokens": [i64([1, 2]), i64([3]), i64([4, 5, 6]), i64([2**63 - 1])],
    "words": [[b"a"], [b"b", b"\x00\xff"], [b"d"], [b""]],
    "empty": [],
}


def tf_sequence_example(context, lists):
    return tf.train.SequenceExample(
        context=tf.train.Features(feature={k: tf_feature(v) for k, v in context.items()}),
        feature_lists=tf.train.FeatureLists(feature_list={
            k: tf.train.FeatureList(feature=[tf_feature(v) for v in vs]) for k, vs in lists.items()}),
    )


def test_make_sequence_example_equals_tf_message():
    ours = make_sequence_example(SEQ_CONTEXT, SEQ_LISTS)
    reference = tf_sequence_example(SEQ_CONTEXT_EXPECTED, SEQ_LISTS_EXPECTED)
    assert tf.train.SequenceExample.FromString(ours) == reference
    assert ours == reference.SerializeToString(deterministic=True)
    # The empty feature list is present (with zero steps), as in TensorFlow.
    assert "empty" in tf.train.SequenceExample.FromString(ours).feature_lists.feature_list


def test_tf_parses_our_sequence_example():
    ours = make_sequence_example(SEQ_CONTEXT, SEQ_LISTS)
    context, lists = tf.io.parse_single_sequence_example(
        ours,
        context_features={
            "id": tf.io.FixedLenFeature([], tf.int64),
            "title": tf.io.FixedLenFeature([], tf.string),
            "weights": tf.io.FixedLenFeature([2], tf.float32),
        },
        sequence_features={
            "frames": tf.io.FixedLenSequenceFeature([3], tf.float32),
            "tokens": tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64),
            "words": tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64),
            "empty": tf.io.FixedLenSequenceFeature([], tf.int64),
        },
    )
    assert int(context["id"]) == 7
    assert context["title"].numpy() == b"abc"
    assert_values_equal(context["weights"].numpy(), f32([0.5, 1.5]))
    np.testing.assert_array_equal(lists["frames"].numpy(), np.arange(12, dtype=np.float32).reshape(4, 3))
    assert lists["tokens"].to_list() == [[1, 2], [3], [4, 5, 6], [2**63 - 1]]
    assert lists["words"].to_list() == [[b"a"], [b"b", b"\x00\xff"], [b"d"], [b""]]
    assert lists["empty"].shape == (0,)


def test_tf_sequence_example_roundtrip_through_both():
    reference = tf_sequence_example(SEQ_CONTEXT_EXPECTED, SEQ_LISTS_EXPECTED)
    context, lists = parse_sequence_example(reference.SerializeToString())
    assert_features_equal(context, SEQ_CONTEXT_EXPECTED)
    assert set(lists) == set(SEQ_LISTS_EXPECTED)
    for key, want in SEQ_LISTS_EXPECTED.items():
        assert len(lists[key]) == len(want)
        for g, w in zip(lists[key], want):
            assert_values_equal(g, w, key)
    # Re-encoding what we decoded gives TensorFlow's bytes back.
    assert make_sequence_example(context, lists) == reference.SerializeToString(deterministic=True)


# --------------------------------------------------------------------------- index over a TF-written file


def test_index_of_tf_written_file(tmp_path):
    path = tmp_path / "data.tfrecord"
    tf_write(path, PAYLOADS)
    expected = tf_read(path)

    index_path = build_index(path)
    assert index_path == str(path) + ".index"
    want_lines = "".join(f"{o} {len(p) + OVERHEAD}\n" for o, p in zip(header_offsets(PAYLOADS), PAYLOADS))
    assert Path(index_path).read_text() == want_lines

    index = load_index(index_path)
    assert index.dtype == np.int64 and index.shape == (len(PAYLOADS), 2)
    assert int(index[-1, 0] + index[-1, 1]) == path.stat().st_size

    with IndexedReader(path, index=index_path) as reader:
        assert len(reader) == len(expected)
        assert [reader[i] for i in range(len(reader))] == expected
        assert reader[-1] == expected[-1]
        assert reader[BIG] == expected[BIG]
        # Random order too.
        order = np.random.default_rng(0).permutation(len(expected)).tolist()
        assert [reader[i] for i in order] == [expected[i] for i in order]
        with pytest.raises(IndexError):
            reader[len(expected)]

    # The default index beside the file, an in-memory array, and a fresh scan agree.
    for kwargs in ({}, {"index": index}):
        with IndexedReader(path, **kwargs) as reader:
            assert [reader[i] for i in range(len(reader))] == expected
    os.unlink(index_path)
    with IndexedReader(path) as reader:
        assert [reader[i] for i in range(len(reader))] == expected


def test_index_explicit_path_and_empty_tf_file(tmp_path):
    path = tmp_path / "empty.tfrecord"
    with tf.io.TFRecordWriter(str(path)):
        pass
    index_path = tmp_path / "elsewhere.idx"
    assert build_index(path, index_path) == str(index_path)
    assert index_path.read_text() == ""
    assert load_index(index_path).shape == (0, 2)
    assert len(IndexedReader(path, index=index_path)) == 0


@pytest.mark.parametrize("options", ["GZIP", "ZLIB"])
def test_index_refuses_tf_compressed_file(tmp_path, options):
    path = tmp_path / "data.tfrecord"
    tf_write(path, [b"a", b"b"], options)
    with pytest.raises(TFRecordError, match="compressed"):
        build_index(path)
    assert not os.path.exists(str(path) + ".index")


# --------------------------------------------------------------------------- import order


_IMPORT_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    {imports}
    tf = tensorflow
    assert list(sys.modules).index("{first}") < list(sys.modules).index("{second}")

    ours = tfrecord_torch.make_example({{"i": [1, -2, 2**63 - 1], "f": [0.5], "b": [b"x", b""]}})
    message = tf.train.Example.FromString(ours)
    assert list(message.features.feature["i"].int64_list.value) == [1, -2, 2**63 - 1]
    assert list(message.features.feature["f"].float_list.value) == [0.5]
    assert list(message.features.feature["b"].bytes_list.value) == [b"x", b""]

    theirs = tf.train.Example(features=tf.train.Features(feature={{
        "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[3, -4])),
        "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\\xff"])),
    }})).SerializeToString()
    parsed = tfrecord_torch.parse_example(theirs)
    assert parsed["i"].tolist() == [3, -4] and parsed["b"] == [b"\\xff"]
    assert tfrecord_torch.make_example(parsed) == tf.train.Example.FromString(theirs).SerializeToString(
        deterministic=True)

    path = sys.argv[1]
    with tfrecord_torch.RecordWriter(path) as w:
        w.write(ours)
        w.write(theirs)
    assert [bytes(r) for r in tf.data.TFRecordDataset(path).as_numpy_iterator()] == [ours, theirs]
    with tf.io.TFRecordWriter(path + ".tf") as w:
        w.write(theirs)
    assert list(tfrecord_torch.read_records(path + ".tf")) == [theirs]
    print("ROUNDTRIP-OK")
""")


@pytest.mark.parametrize("first,second", [("tensorflow", "tfrecord_torch"),
                                          ("tfrecord_torch", "tensorflow")])
def test_import_order(tmp_path, first, second):
    code = _IMPORT_SCRIPT.format(imports=f"import {first}\nimport {second}", first=first, second=second)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.tfrecord")],
                            capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROUNDTRIP-OK" in result.stdout


# --------------------------------------------------------------------------- corruption parity


def _tf_error(path, options=None) -> tf.errors.DataLossError:
    with pytest.raises(tf.errors.DataLossError) as info:
        tf_read(path, options)
    return info.value


def _our_error(path, compression="auto") -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        for _ in read_records(path, compression=compression):
            pass
    return info.value


def _tf_reported_offset(error, what="corrupted") -> int:
    match = re.search(rf"{what} record at (\d+)", error.message)
    assert match, error.message
    return int(match.group(1))


CORRUPT_CASES = {
    "one_byte": 1,
    "in_equal_run": RUN,
    "after_empty_run": 33,
    "300KB": PAYLOADS.index(max(PAYLOADS[:BIG - 6], key=len)),
    "straddling": BIG - 3,
    "2MB": BIG,
    "after_2MB": BIG + 2,
    "last": len(PAYLOADS) - 1,
}


@pytest.mark.parametrize("record", list(CORRUPT_CASES.values()), ids=list(CORRUPT_CASES))
def test_corrupt_payload_parity(tmp_path, record):
    assert len(PAYLOADS[record]) > 0
    path = tmp_path / "data.tfrecord"
    tf_write(path, PAYLOADS)
    offset = header_offsets(PAYLOADS)[record]
    data = bytearray(path.read_bytes())
    data[offset + HEADER + len(PAYLOADS[record]) // 2] ^= 0x20
    path.write_bytes(bytes(data))

    tf_error = _tf_error(path)
    # TensorFlow names the payload's offset; we name the header's.
    assert _tf_reported_offset(tf_error) == offset + HEADER

    for compression in ("auto", None):
        error = _our_error(path, compression)
        assert error.offset == offset
        assert error.record == record
        assert error.path == str(path)
        assert str(offset) in str(error)
    # Reading without verification passes the corrupt payload through.
    got = list(read_records(path, verify=False))
    assert got[record] != PAYLOADS[record] and len(got) == len(PAYLOADS)


@pytest.mark.parametrize("record", [0, RUN, BIG, len(PAYLOADS) - 1], ids=["first", "run", "2MB", "last"])
def test_corrupt_header_parity(tmp_path, record):
    path = tmp_path / "data.tfrecord"
    tf_write(path, PAYLOADS)
    offset = header_offsets(PAYLOADS)[record]
    data = bytearray(path.read_bytes())
    data[offset + 9] ^= 0x01  # the length's CRC
    path.write_bytes(bytes(data))

    assert _tf_reported_offset(_tf_error(path)) == offset
    error = _our_error(path)
    assert (error.offset, error.record, error.path) == (offset, record, str(path))


@pytest.mark.parametrize(("options", "ours"), COMPRESSIONS[1:], ids=COMPRESSION_IDS[1:])
def test_corrupt_payload_in_compressed_file_parity(tmp_path, options, ours):
    """A payload corrupted before compression: offsets are in the decompressed stream."""
    payloads = PAYLOADS[:70]
    record = RUN
    plain = tmp_path / "plain.tfrecord"
    tf_write(plain, payloads)
    offset = header_offsets(payloads)[record]
    data = bytearray(plain.read_bytes())
    data[offset + HEADER + 3] ^= 0xFF
    path = tmp_path / "data.tfrecord"
    path.write_bytes(gzip.compress(bytes(data)) if ours == "gzip" else zlib.compress(bytes(data)))

    assert _tf_reported_offset(_tf_error(path, options)) == offset + HEADER
    for compression in ("auto", ours):
        error = _our_error(path, compression)
        assert (error.offset, error.record, error.path) == (offset, record, str(path))


@pytest.mark.parametrize("cut", [HEADER, HEADER + 5, -2], ids=["after_header", "mid_payload", "in_footer"])
def test_truncated_file_parity(tmp_path, cut):
    payloads = [b"y" * 100] * 3 + [b"z" * 300]
    path = tmp_path / "data.tfrecord"
    tf_write(path, payloads)
    last = header_offsets(payloads)[-1]
    data = path.read_bytes()
    path.write_bytes(data[:last + cut] if cut > 0 else data[:cut])

    assert _tf_reported_offset(_tf_error(path), "truncated") == last
    error = _our_error(path)
    assert (error.offset, error.record, error.path) == (last, len(payloads) - 1, str(path))


def _truncated_compressed_file(folder, options, count, fraction):
    rng = np.random.default_rng(count)
    payloads = [rng.bytes(1000) for _ in range(count)]  # incompressible: a cut lands mid-data
    path = folder / "data.tfrecord"
    tf_write(path, payloads, options)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])
    return path


def _tf_truncation(path, options):
    """How many records TensorFlow reads before the truncation, and the offset it names."""
    got = []
    with pytest.raises(tf.errors.DataLossError) as info:
        for record in tf.data.TFRecordDataset(str(path), compression_type=options):
            got.append(bytes(record.numpy()))
    return len(got), _tf_reported_offset(info.value, "truncated")


TRUNCATED_COMPRESSED = [
    pytest.param(options, ours, count, fraction, id=f"{ours}-{count}x1KB-cut{fraction}")
    for options, ours in COMPRESSIONS[1:] for count, fraction in ((200, 0.5), (3000, 0.8))
]


@pytest.mark.parametrize(("options", "ours", "count", "fraction"), TRUNCATED_COMPRESSED)
def test_truncated_compressed_file_both_fail(tmp_path, options, ours, count, fraction):
    path = _truncated_compressed_file(tmp_path, options, count, fraction)
    intact, tf_offset = _tf_truncation(path, options)
    assert 0 < intact < count
    assert tf_offset == intact * (1000 + OVERHEAD)
    for compression in ("auto", ours):
        error = _our_error(path, compression)
        assert error.path == str(path)
        assert 0 <= error.offset <= tf_offset and 0 <= error.record <= intact


@pytest.mark.parametrize(("options", "ours", "count", "fraction"), TRUNCATED_COMPRESSED)
def test_truncated_compressed_file_error_names_the_cut_record(tmp_path, options, ours, count,
                                                              fraction):
    path = _truncated_compressed_file(tmp_path, options, count, fraction)
    intact, tf_offset = _tf_truncation(path, options)
    error = _our_error(path, ours)
    assert (error.offset, error.record) == (tf_offset, intact)


def test_corruption_error_survives_pickling(tmp_path):
    import pickle

    path = tmp_path / "data.tfrecord"
    tf_write(path, [b"abc"] * 3)
    data = bytearray(path.read_bytes())
    data[2 * 19 + HEADER] ^= 1
    path.write_bytes(bytes(data))
    error = pickle.loads(pickle.dumps(_our_error(path)))
    assert isinstance(error, CorruptRecordError) and isinstance(error, tfrecord_torch.TFRecordError)
    assert (error.offset, error.record, error.path) == (38, 2, str(path))
