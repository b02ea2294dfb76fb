"""TFRecord framing against TensorFlow: files TensorFlow writes read back exactly,
files written here read by TensorFlow, plain and compressed, byte for byte.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
import zlib

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tfrecord_torch import RecordWriter, read_records

from .common import (
    BIG,
    COMPRESSION_IDS,
    COMPRESSIONS,
    HYPOTHESIS,
    PAYLOADS,
    header_offsets,
    our_write,
    tf_read,
    tf_write,
)

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
