"""RecordWriter's options with TensorFlow as the oracle: with the same
compression options (``CompressionOptions`` here, ``tf.io.TFRecordOptions``
there) both writers write the same bytes, flushes included; each reads what
the other writes; ``RecordTail`` follows a file TensorFlow's writer is
writing (across a rotation, and raising when TensorFlow's writer starts the
file again in place), and TensorFlow reads what the in-place writer has
flushed."""

import os
import random
import zlib

import pytest
import tensorflow as tf
from tensorflow.python.lib.io import tf_record

from tfrecord_torch import CompressionOptions, CorruptRecordError, RecordTail, RecordWriter, read_records

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


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_tail_raises_when_tensorflows_writer_starts_the_file_again(tmp_path, compression):
    """A restarted job's ``tf.io.TFRecordWriter`` opens the same path again:
    the file is truncated and written from its start, under the same inode.
    The tail raises rather than hand out the new run's records after its
    place as if they followed the old run's, whether the new run is still
    short of the tail's place or already past it."""
    path = tmp_path / "events"
    options = tf.io.TFRecordOptions(TF_TYPE[compression])
    run1 = [b"run 1, step %d" % i for i in range(4)]
    with tf.io.TFRecordWriter(str(path), options) as w:
        for r in run1:
            w.write(r)
    tail = RecordTail(path)
    assert list(tail) == run1
    run2 = [b"run 2, step %d" % i for i in range(8)]  # the same sizes: the framing lines up
    with tf.io.TFRecordWriter(str(path), options) as w:
        w.write(run2[0])
        w.flush()
        with pytest.raises(CorruptRecordError, match="the file was truncated: it is") as e:
            next(tail)
        assert (e.value.path, e.value.record) == (str(path), 4)
        for r in run2[1:]:
            w.write(r)
    with pytest.raises(CorruptRecordError, match="truncated and written again") as e:
        next(tail)
    assert (e.value.path, e.value.record) == (str(path), 4)
    assert list(RecordTail(path)) == tf_read(path, compression) == run2


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_tail_follows_tensorflows_writer_across_a_rotation(tmp_path, compression):
    """TensorFlow's writer finishes a file, it is renamed away and a new one is
    written under the name: the tail hands out the rest of the old file, then
    the new file, as TensorFlow reads the two."""
    path = tmp_path / "events"
    options = tf.io.TFRecordOptions(TF_TYPE[compression])
    records = payloads(20)
    with tf.io.TFRecordWriter(str(path), options) as w:
        for r in records[:5]:
            w.write(r)
        w.flush()
        tail = RecordTail(path)
        seen = list(tail)
        for r in records[5:10]:
            w.write(r)
    os.rename(path, tmp_path / "events.1")
    with tf.io.TFRecordWriter(str(path), options) as w:
        for r in records[10:15]:
            w.write(r)
        w.flush()
        seen.extend(tail)
        assert seen == records[:15] and tail.replacements == 1
        for r in records[15:]:
            w.write(r)
    seen.extend(tail)
    tail.raise_if_truncated()
    assert seen == tf_read(tmp_path / "events.1", compression) + tf_read(path, compression) == records
