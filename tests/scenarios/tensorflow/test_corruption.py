"""Corrupt and truncated record files: the error names the record and byte offset
TensorFlow names, plain and compressed.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import pytest
import tensorflow as tf

import tfrecord_torch
from tfrecord_torch import CorruptRecordError, read_records

from .common import (
    BIG,
    COMPRESSION_IDS,
    COMPRESSIONS,
    HEADER,
    OVERHEAD,
    PAYLOADS,
    RUN,
    header_offsets,
    tf_read,
    tf_write,
)


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


def _tf_examples(count: int) -> list[bytes]:
    return [tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))})).SerializeToString() for i in range(count)]


@pytest.mark.parametrize("damage", ["payload", "header", "header, indexed"])
def test_a_damaged_shard_says_what_to_do_and_the_advice_reads_the_rest(tmp_path, damage):
    """A TF team's shard damaged in a copy: the dataset's error names the
    file, record and offset and says what to do; reading on as it says
    (on_error="warn") gives every record TensorFlow wrote but the damaged
    one, and the ones after a bad header only where the file has an index."""
    import warnings

    from tfrecord_torch import TFRecordDataset, build_index

    path = tmp_path / "train-00000-of-00001.tfrecord"
    payloads = _tf_examples(6)
    tf_write(path, payloads)
    if damage.endswith("indexed"):
        build_index(str(path))
    offset = header_offsets(payloads)[2]
    data = bytearray(path.read_bytes())
    data[offset + (HEADER + 3 if damage == "payload" else 9)] ^= 0x01
    path.write_bytes(bytes(data))

    with pytest.raises(CorruptRecordError) as info:
        list(TFRecordDataset(str(path)))
    message = str(info.value)
    assert message.startswith(f"{path}: record 2 at byte offset {offset}: ")
    assert "copy it again from its source" in message and 'on_error="warn"' in message
    assert ("records after this one are lost" in message) == damage.startswith("header")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped record's report: on_error="warn" says it
        got = [int(r["x"][0]) for r in TFRecordDataset(str(path), on_error="warn")]
    assert got == ([0, 1] if damage == "header" else [0, 1, 3, 4, 5])


def test_a_damaged_records_advice_comes_once_from_a_dataloader_worker(tmp_path):
    path = tmp_path / "data.tfrecord"
    payloads = _tf_examples(4)
    tf_write(path, payloads)
    data = bytearray(path.read_bytes())
    data[header_offsets(payloads)[1] + HEADER + 1] ^= 0x01
    path.write_bytes(bytes(data))
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset

    with pytest.raises(CorruptRecordError) as info:
        list(torch.utils.data.DataLoader(TFRecordDataset(str(path)), num_workers=1))
    assert info.value.reason.startswith("payload CRC mismatch (data corrupted)")
    assert str(info.value).count("copy it again from its source") == 1
    # torch's own re-raise gives the class the worker's traceback text: the fields come back, the advice once
    text = f"Caught CorruptRecordError in DataLoader worker process 0.\nTraceback (most recent call last):\n" \
           f"tfrecord_torch.errors.CorruptRecordError: {info.value}"
    again = CorruptRecordError(text)
    assert (again.path, again.record, again.offset) == (info.value.path, 1, info.value.offset)
    assert again.reason.startswith("payload CRC mismatch (data corrupted) (raised in a DataLoader worker)\n")
    assert str(again).count("copy it again from its source") == 1
