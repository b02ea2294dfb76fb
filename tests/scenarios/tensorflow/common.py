"""Shared pieces of the TensorFlow interoperability tests: TensorFlow as the
writer and reader of record files and Example messages, the payloads that
exercise every path of the reader, and exact comparisons of decoded values.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, settings

from tfrecord_torch import RecordWriter

OVERHEAD = 16  # framing bytes around each payload
HEADER = 12

# TensorFlow's option string <-> our compression argument.
COMPRESSIONS = [(None, None), ("GZIP", "gzip"), ("ZLIB", "zlib")]
COMPRESSION_IDS = ["plain", "gzip", "zlib"]

HYPOTHESIS = settings(max_examples=30, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


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
