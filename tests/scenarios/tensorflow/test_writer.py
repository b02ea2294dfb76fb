"""RecordWriter's options with TensorFlow as the oracle: with the same
compression options (``CompressionOptions`` here, ``tf.io.TFRecordOptions``
there) both writers write the same bytes, flushes included; each reads what
the other writes; ``RecordTail`` follows a file TensorFlow's writer is
writing, and TensorFlow reads what the in-place writer has flushed."""

import random
import zlib

import pytest
import tensorflow as tf
from tensorflow.python.lib.io import tf_record

from tfrecord_torch import CompressionOptions, RecordTail, RecordWriter, read_records

TF_TYPE = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}
TF_NAME = {"level": "compression_level", "window_bits": "window_bits", "mem_level": "mem_level",
           "strategy": "compression_strategy"}
STRATEGY = {"default": zlib.Z_DEFAULT_STRATEGY, "filtered": zlib.Z_FILTERED, "huffman_only": zlib.Z_HUFFMAN_ONLY,
            "rle": zlib.Z_RLE, "fixed": zlib.Z_FIXED}
OPTIONS = [{}, {"level": 0}, {"level": 1}, {"level": 2}, {"level": 9}, {"level": -1, "mem_level": 1},
           {"mem_level": 5}, {"mem_level": 8}, {"window_bits": 8}, {"window_bits": 9}, {"window_bits": 12},
           {"strategy": "filtered"}, {"strategy": "huffman_only"}, {"strategy": "rle"}, {"strategy": "fixed"},
           {"level": 3, "window_bits": 10, "mem_level": 4, "strategy": "filtered"}]


def payloads(n=40, seed=0):
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefgh") for _ in range(rnd.randint(2, 9))) for _ in range(200)]
    return [b" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 800))) for _ in range(n)]


def tf_options(compression, options):
    kw = {TF_NAME[k]: STRATEGY.get(v, v) if k == "strategy" else v for k, v in options.items()}
    return tf.io.TFRecordOptions(TF_TYPE[compression], **kw)


def tf_read(path, compression):
    return [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type=TF_TYPE[compression])]


def ours(path, records, compression, options, flush_every=None):
    with RecordWriter(path, compression=compression, atomic=flush_every is None,
                      compression_options=CompressionOptions(**options) if compression else None) as w:
        for i, r in enumerate(records):
            w.write(r)
            if flush_every and i % flush_every == 0:
                w.flush()
    return path.read_bytes()


def theirs(path, records, compression, options, flush_every=None):
    with tf.io.TFRecordWriter(str(path), tf_options(compression, options)) as w:
        for i, r in enumerate(records):
            w.write(r)
            if flush_every and i % flush_every == 0:
                w.flush()
    return path.read_bytes()


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_same_options_same_bytes_and_each_reads_the_other(tmp_path, compression, options):
    records = payloads()
    mine = ours(tmp_path / "ours", records, compression, options)
    assert tf_read(tmp_path / "ours", compression) == records
    if compression == "gzip" and "window_bits" in options:
        # TF's TFRecordOptions drops the GZIP wrapper when window_bits is given
        # (it writes a ZLIB stream its own GZIP reader refuses): nothing to compare
        return
    tf_bytes = theirs(tmp_path / "theirs", records, compression, options)
    assert list(read_records(tmp_path / "theirs")) == records
    if options.get("level") == 0:
        # stored blocks end where each writer's input does: TF buffers 256 KiB, this
        # writer hands zlib one record at a time; the same data, other block boundaries
        plain = zlib.decompress(tf_bytes, 31 if compression == "gzip" else 15)
        assert zlib.decompress(mine, 31 if compression == "gzip" else 15) == plain
    else:
        assert tf_bytes == mine


def test_default_options_give_tensorflows_bytes_for_large_input(tmp_path):
    """Large enough (870 kB) for zlib's memory level to change the output: TF's is 9."""
    records = payloads(400, seed=1)
    assert sum(map(len, records)) > 600_000
    for compression in ("gzip", "zlib"):
        assert ours(tmp_path / "ours", records, compression, {}) == theirs(tmp_path / "theirs", records,
                                                                           compression, {})


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_flushes_give_tensorflows_bytes(tmp_path, compression):
    records = payloads(30)
    for every in (1, 4):
        assert ours(tmp_path / "ours", records, compression, {}, every) == \
            theirs(tmp_path / "theirs", records, compression, {}, every)


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_tail_follows_tensorflows_writer(tmp_path, compression):
    path = tmp_path / "events"
    records = payloads(25)
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(TF_TYPE[compression])) as w:
        tail = RecordTail(path)
        seen = list(tail)
        for i, r in enumerate(records):
            w.write(r)
            if i % 5 == 4:
                w.flush()
                seen.extend(tail)
                assert seen == records[:i + 1]
    seen.extend(tail)
    assert seen == records and tail.pending == 0


def test_tensorflow_reads_what_the_in_place_writer_flushed(tmp_path):
    path = tmp_path / "events"
    with RecordWriter(path, atomic=False) as w:
        for r in (b"a", b"b"):
            w.write(r)
        w.flush()
        assert tf_read(path, None) == [b"a", b"b"]
        assert list(tf_record.tf_record_iterator(str(path))) == [b"a", b"b"]
        w.write(b"c")
    assert tf_read(path, None) == [b"a", b"b", b"c"]
