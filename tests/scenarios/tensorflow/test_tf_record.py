"""TensorFlow's own record-file tests (tensorflow/python/lib/io/tf_record_test.py),
transcribed: the same records written and read by this library's
``RecordWriter``, ``read_records`` and ``IndexedReader``, with TensorFlow's
writer and readers (``tf.io.TFRecordWriter``, ``tf.data.TFRecordDataset``,
``tf_record_random_reader``) on the same files as the oracle, and zlib/gzip
for the compressed streams. One test per TF method, named after it; the
close-and-flush methods run for each compression, as TF's three classes do.

A file followed while it grows is written in place
(``RecordWriter(path, atomic=False)``, TF's writer writes in place) and read
with ``RecordTail`` (TF: ``tf_record_iterator``, which keeps its offset after
StopIteration). Where TF's iterator raises DataLossError at a partial last
record, ``RecordTail`` stops and reports the partial bytes in ``pending``
(mid-write is the normal state of a followed file); TF's iterator runs beside
it on the same file as the oracle.

Not applicable: in ``testCompressionOptions``, the ``flush_mode``,
``input_buffer_size`` and ``output_buffer_size`` rows (they tune TF's
internal buffering; this writer hands each record to zlib as it comes).
``testBadFile`` (from earlier versions of the file) is kept.
"""

import gc
import gzip
import random
import string
import zlib

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.lib.io import tf_record

from tfrecord_torch import (
    Compression,
    CompressionOptions,
    CorruptRecordError,
    IndexedReader,
    Payload,
    RecordTail,
    RecordWriter,
    TFRecordDataset,
    TFRecordError,
    read_records,
)

TEXT = b"""Gaily bedight,
    A gallant knight,
    In sunshine and in shadow,
    Had journeyed long,
    Singing a song,
    In search of Eldorado.
"""  # the first verse of the poem TF's test uses
POEM = TEXT + b"""
    But he grew old
    This knight so bold
    And o'er his heart a shadow
    Fell as he found
    No spot of ground
    That looked like Eldorado.

   And, as his strength
   Failed him at length,
   He met a pilgrim shadow
   'Shadow,' said he,
   'Where can it be
   This land of Eldorado?'

   'Over the Mountains
    Of the Moon'
    Down the Valley of the Shadow,
    Ride, boldly ride,'
    The shade replied,
    'If you seek for Eldorado!'
    """  # the whole poem, for testCompressionOptions: Z_FILTERED's cost depends on it
NUM_FILES, NUM_RECORDS = 2, 7
TF_TYPE = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}


def record(f, r):
    return f"Record {r} of file {f}".encode()


def write(path, records, compression=None, options=None):
    with RecordWriter(path, compression=compression, compression_options=options) as w:
        for r in records:
            w.write(r)
    return path


def tf_write(path, records, compression=None):
    with tf.io.TFRecordWriter(str(path), options=tf.io.TFRecordOptions(TF_TYPE[compression])) as w:
        for r in records:
            w.write(r)
    return path


def tf_read(path, compression=None):
    return [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type=TF_TYPE[compression])]


def create_files(tmp_path, compression, prefix):
    return [write(tmp_path / f"{prefix}tfrecord.{i}.txt", [record(i, j) for j in range(NUM_RECORDS)], compression)
            for i in range(NUM_FILES)]


# TFRecordWriterTest


def test_write_read_zlib_files(tmp_path):
    files = create_files(tmp_path, None, "uncompressed")
    zlib_files = [zlib.compress(f.read_bytes()) for f in files]
    assert all(z != f.read_bytes() for z, f in zip(zlib_files, files))
    compressed = create_files(tmp_path, "zlib", "compressed")
    # byte for byte what zlib.compress gives (TF's test) and what TF's writer gives
    assert [f.read_bytes() for f in compressed] == zlib_files
    tf_files = [tf_write(tmp_path / f"tf.{i}.z", [record(i, j) for j in range(NUM_RECORDS)], "zlib")
                for i in range(NUM_FILES)]
    assert [f.read_bytes() for f in tf_files] == zlib_files
    assert [zlib.decompress(f.read_bytes()) for f in compressed] == [f.read_bytes() for f in files]


def test_write_read_gzip_files(tmp_path):
    files = create_files(tmp_path, None, "uncompressed")
    assert all(gzip.compress(f.read_bytes()) != f.read_bytes() for f in files)
    compressed = create_files(tmp_path, "gzip", "compressed")
    assert [gzip.decompress(f.read_bytes()) for f in compressed] == [f.read_bytes() for f in files]
    assert [tf_read(f, "gzip") for f in compressed] == [[record(i, j) for j in range(NUM_RECORDS)]
                                                       for i in range(NUM_FILES)]


def test_no_compression_type(tmp_path):
    for none in (None, ""):
        path = write(tmp_path / "none.tfrecord", [b"a"], none)
        assert tf_read(path) == [b"a"] and list(read_records(path, compression=none)) == [b"a"]
    for bad in (5, "BZ2"):
        with pytest.raises(ValueError):
            tf.io.TFRecordOptions(bad)
        with pytest.raises(ValueError, match="compression"):
            RecordWriter(tmp_path / "bad.tfrecord", compression=bad)


def test_zlib_compression_type(tmp_path):
    for i, zlib_t in enumerate(("ZLIB", Compression.ZLIB)):
        path = write(tmp_path / f"z{i}.tfrecord", [b"a", b"b"], zlib_t)
        assert tf_read(path, "zlib") == [b"a", b"b"]
        assert list(read_records(path, compression=zlib_t)) == [b"a", b"b"]


def test_compression_options(tmp_path):
    """Each option against the default: both files read back the records (here
    and in TF), and the size moves the way TF's test says."""
    rnd = random.Random(123)
    random_record = "".join(rnd.choice(string.digits) for _ in range(10000)).encode()
    repeated_record = POEM
    for _ in range(10000):
        start, length = rnd.randint(0, len(POEM)), rnd.randint(10, 200)
        repeated_record += POEM[start:start + length]
    records = [random_record, repeated_record, random_record]
    tests = [
        ({"level": 2}, -1),  # lower compression is worse (TF: compression_level)
        ({"level": 6}, 0),  # the default level is 6
        ({"window_bits": 8}, -1),  # a smaller window than the default's is worse
        ({"strategy": zlib.Z_HUFFMAN_ONLY}, -1),  # worse (TF: compression_strategy)
        ({"strategy": zlib.Z_FILTERED}, -1),  # worse
    ]
    path_a = write(tmp_path / "tfrecord_a", records, "zlib")
    assert list(read_records(path_a, compression="zlib")) == tf_read(path_a, "zlib") == records
    for options, delta_sign in tests:
        path_b = write(tmp_path / "tfrecord_b", records, "zlib", CompressionOptions(**options))
        assert list(read_records(path_b, compression="zlib")) == tf_read(path_b, "zlib") == records, options
        delta = path_a.stat().st_size - path_b.stat().st_size
        assert delta == 0 if delta_sign == 0 else delta // delta_sign > 0, (options, delta)


# TFRecordWriterZlibTest


def test_zlib_flush_record(tmp_path):
    path = write(tmp_path / "small_record", [b"small record"])
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS)
    output = b""
    for c in path.read_bytes():  # more blocks, and trailing blocks
        output += compressor.compress(bytes([c])) + compressor.flush(zlib.Z_FULL_FLUSH)
    output += compressor.flush(zlib.Z_FULL_FLUSH) + compressor.flush(zlib.Z_FULL_FLUSH)
    output += compressor.flush(zlib.Z_FINISH)
    path.write_bytes(output)
    assert tf_read(path, "zlib") == [b"small record"]
    assert list(read_records(path, compression="zlib")) == [b"small record"]
    assert list(read_records(path)) == [b"small record"]  # detected


@pytest.mark.parametrize("original", [[b"foo", b"bar"], [TEXT * 10240]], ids=["small", "large"])
def test_zlib_read_write(tmp_path, original):
    """testZlibReadWrite and testZlibReadWriteLarge (a 1.3 MB record)."""
    path = write(tmp_path / "zlib_read_write.tfrecord", original)
    zpath = tmp_path / "zlib_read_write.tfrecord.z"
    zpath.write_bytes(zlib.compress(path.read_bytes()))
    assert tf_read(zpath, "zlib") == original
    assert list(read_records(zpath, compression="zlib")) == original


def test_gzip_read_write(tmp_path):
    path = write(tmp_path / "gzip_read_write.tfrecord", [b"foo", b"bar"])
    gzpath = tmp_path / "tfrecord.gz"
    with gzip.GzipFile(gzpath, "wb") as f:
        f.write(path.read_bytes())
    assert tf_read(gzpath, "gzip") == list(read_records(gzpath, compression="gzip")) == [b"foo", b"bar"]


# TFRecordIteratorTest


def test_iterator(tmp_path):
    records = [record(0, i) for i in range(NUM_RECORDS)]
    path = write(tmp_path / "compressed_records", records, "zlib")
    reader = read_records(path, compression="zlib")
    for expected in records:
        assert next(reader) == expected
    with pytest.raises(StopIteration):
        next(reader)
    assert tf_read(path, "zlib") == records


@pytest.mark.parametrize("original", [[b"foo", b"bar"], [TEXT * 10240]], ids=["small", "large"])
def test_write_zlib_read(tmp_path, original):
    """testWriteZlibRead and testWriteZlibReadLarge: our zlib file is a zlib stream of the plain file."""
    path = write(tmp_path / "write_zlib_read.tfrecord.z", original, "zlib")
    plain = tmp_path / "write_zlib_read.tfrecord"
    plain.write_bytes(zlib.decompress(path.read_bytes()))
    assert tf_read(plain) == list(read_records(plain)) == original


def test_write_gzip_read(tmp_path):
    path = write(tmp_path / "write_gzip_read.tfrecord.gz", [b"foo", b"bar"], "gzip")
    plain = tmp_path / "write_gzip_read.tfrecord"
    with gzip.GzipFile(path, "rb") as f:
        plain.write_bytes(f.read())
    assert tf_read(plain) == list(read_records(plain)) == [b"foo", b"bar"]


def test_bad_file(tmp_path):
    """A file cut inside its first record (14 bytes: the header and 2 of 3
    payload bytes) is an error (TF: DataLossError), not an empty file."""
    path = write(tmp_path / "bad_file", [b"123"])
    cut = tmp_path / "bad_file_truncated"
    cut.write_bytes(path.read_bytes()[:14])
    with pytest.raises(tf.errors.DataLossError):
        tf_read(cut)
    with pytest.raises(CorruptRecordError, match="bad_file_truncated"):
        list(read_records(cut))


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_read_growing_file_preserves_read_offset(tmp_path, compression):
    """At the end of the file the reader stops, again and again; once more is
    written and flushed it returns the new record. TF's iterator follows the
    same (uncompressed, as in TF's test) file alike."""
    path = tmp_path / "file.tfrecord"
    with RecordWriter(path, compression=compression, atomic=False) as writer:
        writer.write(b"one")
        writer.write(b"two")
        writer.flush()
        iterator = RecordTail(path)
        theirs = tf_record.tf_record_iterator(str(path)) if compression is None else None
        assert next(iterator) == b"one"
        assert next(iterator) == b"two"
        for _ in range(2):  # iterating at the end stops, repeatedly
            with pytest.raises(StopIteration):
                next(iterator)
        if theirs is not None:
            assert [next(theirs), next(theirs)] == [b"one", b"two"]
            for _ in range(2):
                with pytest.raises(StopIteration):
                    next(theirs)
        writer.write(b"three")
        writer.flush()
        assert next(iterator) == b"three"  # the prior offset kept
        with pytest.raises(StopIteration):
            next(iterator)
        if theirs is not None:
            assert next(theirs) == b"three"
            with pytest.raises(StopIteration):
                next(theirs)
    assert list(read_records(path)) == tf_read(path, compression) == [b"one", b"two", b"three"]


def test_read_truncated_file_preserves_read_offset(tmp_path):
    """A partial last record stops the reader (pending > 0) where TF's iterator
    raises DataLossError, both repeatedly; once completed the record comes."""
    whole = write(tmp_path / "temp_file", [b"truncated"]).read_bytes()
    path = write(tmp_path / "truncated_file", [b"good"])
    with open(path, "ab", buffering=0) as f:
        f.write(whole[:-1])  # the record without its last byte
        iterator = RecordTail(path)
        theirs = tf_record.tf_record_iterator(str(path))
        assert next(iterator) == next(theirs) == b"good"
        for _ in range(2):
            with pytest.raises(StopIteration):
                next(iterator)
            assert iterator.pending == len(whole) - 1
            with pytest.raises(tf.errors.DataLossError):
                next(theirs)
        with pytest.raises(CorruptRecordError, match="truncated record"):
            iterator.raise_if_truncated()  # when the writer is known to be done
        f.write(whole[-1:])
        assert next(iterator) == next(theirs) == b"truncated"
        with pytest.raises(StopIteration):
            next(iterator)
        with pytest.raises(StopIteration):
            next(theirs)
        assert iterator.pending == 0


# TFRecordRandomReaderTest


def test_random_reader_reading_works(tmp_path):
    records = [record(0, i) for i in range(NUM_RECORDS)]
    path = write(tmp_path / "uncompressed_records", records)
    theirs = tf_record.tf_record_random_reader(str(path))
    offsets = [0]
    for r in records:  # TF's reader: (record, next offset) at an offset
        got, offset = theirs.read(offsets[-1])
        assert got == r
        offsets.append(offset)
    reader = IndexedReader(path)
    assert reader.index[:, 0].tolist() == offsets[:-1]  # our index holds the offsets TF reads at
    assert [reader[i] for i in range(NUM_RECORDS)] == records
    with pytest.raises(IndexError, match="out of range"):  # past the end (TF: IndexError, "Out of range")
        reader[NUM_RECORDS]
    assert [reader[i] for i in reversed(range(NUM_RECORDS))] == records[::-1]


def test_random_reader_throws_error_for_invalid_offset(tmp_path):
    records = [record(0, i) for i in range(NUM_RECORDS)]
    path = write(tmp_path / "uncompressed_records", records)
    with pytest.raises(tf.errors.DataLossError, match="corrupted record"):
        tf_record.tf_record_random_reader(str(path)).read(1)
    index = IndexedReader(path).index.copy()
    index[0, 0] = 1  # 1 is never a record's offset
    with pytest.raises(TFRecordError):
        IndexedReader(path, index=index)[0]


def test_closing_random_reader_causes_errors_for_further_reading(tmp_path):
    path = write(tmp_path / "uncompressed_records", [record(0, i) for i in range(NUM_RECORDS)])
    theirs = tf_record.tf_record_random_reader(str(path))
    theirs.close()
    with pytest.raises(tf.errors.FailedPreconditionError, match="closed"):
        theirs.read(0)
    with IndexedReader(path) as reader:
        assert reader[0] == record(0, 0)
    with pytest.raises(ValueError, match="closed IndexedReader"):
        reader[0]
    reader.close()  # closing again is harmless


# TFRecordWriterCloseAndFlushTests, ...GzipTests, ...ZlibTests

COMPRESSIONS = pytest.mark.parametrize("compression", [None, "gzip", "zlib"])


def records20():
    return [f"Record {r}".encode() for r in range(20)]


@COMPRESSIONS
def test_write_and_leave_open(tmp_path, compression):
    """A writer dropped open does not crash; unlike TF's, which keeps what it
    wrote, it publishes nothing and warns (the documented atomic write)."""
    path = tmp_path / "tf_record_writer_test.txt"
    writer = RecordWriter(path, compression=compression)
    for r in records20():
        writer.write(r)
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del writer
        gc.collect()
    assert not path.exists()


@COMPRESSIONS
def test_write_and_read(tmp_path, compression):
    path = write(tmp_path / "tf_record_writer_test.txt", records20(), compression)
    assert list(read_records(path, compression=compression)) == tf_read(path, compression) == records20()
    theirs = tf_write(tmp_path / "theirs.txt", records20(), compression)
    assert list(read_records(theirs)) == records20()


@COMPRESSIONS
def test_double_close(tmp_path, compression):
    writer = RecordWriter(tmp_path / "tf_record_writer_test.txt", compression=compression)
    writer.write(b"Record 0")
    writer.close()
    writer.close()
    assert tf_read(tmp_path / "tf_record_writer_test.txt", compression) == [b"Record 0"]


@COMPRESSIONS
def test_flush_after_close_is_error(tmp_path, compression):
    """As TF's (FailedPreconditionError there), with the file left complete."""
    path = tmp_path / "tf_record_writer_test.txt"
    writer = RecordWriter(path, compression=compression)
    writer.write(b"Record 0")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.flush()
    theirs = tf.io.TFRecordWriter(str(tmp_path / "theirs"), options=tf.io.TFRecordOptions(TF_TYPE[compression]))
    theirs.close()
    with pytest.raises(tf.errors.FailedPreconditionError):
        theirs.flush()
    assert tf_read(path, compression) == [b"Record 0"]


@COMPRESSIONS
def test_write_after_close_is_error(tmp_path, compression):
    writer = RecordWriter(tmp_path / "tf_record_writer_test.txt", compression=compression)
    writer.write(b"Record 0")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"Record 1")
    assert tf_read(tmp_path / "tf_record_writer_test.txt", compression) == [b"Record 0"]


def test_offsets_of_tf_written_file_match(tmp_path):
    """TF's own file indexed here: the offsets its random reader walks."""
    path = tf_write(tmp_path / "theirs.tfrecord", [record(1, i) for i in range(NUM_RECORDS)])
    theirs = tf_record.tf_record_random_reader(str(path))
    offsets, offset = [], 0
    for _ in range(NUM_RECORDS):
        offsets.append(offset)
        _, offset = theirs.read(offset)
    assert IndexedReader(path).index[:, 0].tolist() == offsets
    assert np.array_equal(IndexedReader(path).index[:, 1], np.diff(offsets + [offset]))


# A file TensorFlow's writer is still writing, read as a finished file


def test_a_file_tfs_writer_still_writes_names_record_tail(tmp_path):
    """TF's writer puts its buffer on disk when it fills, in the middle of a
    record: a dataset reading the file then raises a truncation error that says
    RecordTail follows a growing file, and RecordTail reads what TF wrote so far."""
    path = tmp_path / "events.tfrecord"
    records = [f"step {i} ".encode() * 40 for i in range(20_000)]
    writer = tf.io.TFRecordWriter(str(path))
    written = 0
    while not path.stat().st_size:  # until TF's writer has put part of its buffer on disk
        writer.write(records[written])
        written += 1
    size = path.stat().st_size
    with pytest.raises(CorruptRecordError, match=r"truncated .*RecordTail\(path\).*Following a growing file") as e:
        list(TFRecordDataset(path, features=Payload()))
    assert e.value.path == str(path) and 0 < e.value.offset < size
    with RecordTail(path) as tail:
        so_far = list(tail)
        assert so_far == records[:len(so_far)] and tail.offset == e.value.offset and tail.pending > 0
        writer.close()
        assert so_far + list(tail) == records[:written] == tf_read(path)


@pytest.mark.parametrize("cut", ["header", "record"])
def test_a_truncation_at_the_end_of_tfs_file_names_record_tail(tmp_path, cut):
    """A TF-written file that ends inside a header ("truncated header") or inside
    a record: the error says how to follow a file that is still growing, and
    RecordTail gives the complete records. (TF's dataset stops silently at a
    partial header and raises DataLossError at a partial record.)"""
    records = [record(0, i) for i in range(NUM_RECORDS)]
    path = tf_write(tmp_path / "theirs.tfrecord", records)
    whole = path.read_bytes()
    last = len(whole) - (16 + len(records[-1]))
    path.write_bytes(whole[:last + (5 if cut == "header" else 20)])
    if cut == "header":
        assert tf_read(path) == records[:-1]
    else:
        with pytest.raises(tf.errors.DataLossError):
            tf_read(path)
    with RecordTail(path) as tail:
        assert list(tail) == records[:-1] and tail.pending > 0
    with pytest.raises(CorruptRecordError, match=rf"record {NUM_RECORDS - 1} at byte offset {last}: truncated "
                                                 rf"{cut}.*follow it with tfrecord_torch.RecordTail\(path\)"):
        list(read_records(path))


def test_a_gzip_file_tfs_writer_flushed_names_record_tail(tmp_path):
    """A GZIP file TF's writer has flushed but not closed has no end marker yet:
    the error says how to follow it, and RecordTail reads every record flushed."""
    path = tmp_path / "events.tfrecord.gz"
    writer = tf.io.TFRecordWriter(str(path), options=tf.io.TFRecordOptions("GZIP"))
    for i in range(NUM_RECORDS):
        writer.write(record(0, i))
    writer.flush()
    with pytest.raises(CorruptRecordError, match=r"gzip data is invalid: .*end marker; if a writer is still "
                                                 r"appending to the file, follow it with tfrecord_torch.RecordTail"):
        list(TFRecordDataset(path, features=Payload()))
    with RecordTail(path) as tail:
        assert list(tail) == [record(0, i) for i in range(NUM_RECORDS)]
    writer.close()
