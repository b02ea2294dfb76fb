"""RecordWriter and the framing of one record: TensorFlow's layout, files that
appear only when closed, buffers, standard compressed output, the usual
permissions; writing in place (``atomic=False``) with ``flush``; the checks of
:class:`CompressionOptions`."""

import gzip
import os
import struct
import zlib

import numpy as np
import pytest

from tfrecord_torch import CompressionOptions, RecordTail, RecordWriter, read_records
from tfrecord_torch.records.crc import masked_crc32c
from tfrecord_torch.records.writer import frame

from .test_framing import write


def test_frame_layout_is_tensorflow_framing():
    data = frame(b"abc")
    assert data[:8] == struct.pack("<Q", 3)
    assert struct.unpack("<I", data[8:12])[0] == masked_crc32c(struct.pack("<Q", 3))
    assert data[12:15] == b"abc"
    assert struct.unpack("<I", data[15:])[0] == masked_crc32c(b"abc")


def test_writer_leaves_no_file_on_error(tmp_path):
    path = tmp_path / "out.tfrecord"
    with pytest.raises(RuntimeError):
        with RecordWriter(path) as w:
            w.write(b"abc")
            raise RuntimeError("boom")
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_writer_file_appears_only_when_closed(tmp_path):
    path = tmp_path / "out.tfrecord"
    w = RecordWriter(path)
    w.write(b"abc")
    assert not path.exists()
    w.close()
    assert list(read_records(path)) == [b"abc"]
    with pytest.raises(ValueError, match="closed"):
        w.write(b"more")


def test_writer_accepts_buffers(tmp_path):
    path = tmp_path / "b.tfrecord"
    with RecordWriter(path) as w:
        w.write(bytearray(b"ab"))
        w.write(memoryview(b"cd"))
        w.write(np.arange(3, dtype=np.int32))
    assert list(read_records(path)) == [b"ab", b"cd", np.arange(3, dtype=np.int32).tobytes()]


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_output_is_standard(tmp_path, compression):
    path = write(tmp_path / "a", [b"hello", b"world"], compression)
    raw = gzip.decompress(path.read_bytes()) if compression == "gzip" else zlib.decompress(path.read_bytes())
    assert raw == frame(b"hello") + frame(b"world")


def test_written_files_get_the_usual_permissions(tmp_path):
    import stat

    mask = os.umask(0o022)
    try:
        path = write(tmp_path / "p.tfrecord", [b"x"])
        from tfrecord_torch import build_index

        index = build_index(path)
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(os.stat(index).st_mode) == 0o644


COMPRESSIONS = pytest.mark.parametrize("compression", [None, "gzip", "zlib"])


def test_flush_in_place_makes_the_records_written_readable(tmp_path):
    path = tmp_path / "live.tfrecord"
    with RecordWriter(path, atomic=False) as w:
        w.write(b"one")
        w.write(b"two")
        w.flush()
        assert list(read_records(path)) == [b"one", b"two"]
        w.write(b"three")
        w.flush()
        assert list(read_records(path)) == [b"one", b"two", b"three"]
    assert list(read_records(path)) == [b"one", b"two", b"three"]
    assert os.listdir(tmp_path) == ["live.tfrecord"]


@COMPRESSIONS
def test_flush_in_place_makes_compressed_records_readable(tmp_path, compression):
    """A compressed stream is flushed too, so every record written is whole in the file."""
    path = tmp_path / "live"
    payloads = [bytes([i]) * (i * 997) for i in range(20)]
    with RecordWriter(path, compression=compression, atomic=False) as w:
        tail = RecordTail(path, compression=compression)
        for i, p in enumerate(payloads):
            w.write(p)
            w.flush()
            assert list(tail) == [p] and tail.pending == 0, i
    assert list(read_records(path)) == payloads


def test_flush_with_atomic_writes_the_hidden_file_only(tmp_path):
    path = tmp_path / "out.tfrecord"
    with RecordWriter(path) as w:
        w.write(b"abc")
        w.flush()
        assert not path.exists()
        (hidden,) = os.listdir(tmp_path)
        assert list(read_records(tmp_path / hidden)) == [b"abc"]  # the data is in the temporary file
    assert list(read_records(path)) == [b"abc"]


@COMPRESSIONS
@pytest.mark.parametrize("atomic", [True, False])
def test_flush_and_write_after_close_are_errors(tmp_path, compression, atomic):
    w = RecordWriter(tmp_path / "x", compression=compression, atomic=atomic)
    w.write(b"a")
    w.close()
    with pytest.raises(ValueError, match="flush of a closed RecordWriter .*x"):
        w.flush()
    with pytest.raises(ValueError, match="write to a closed RecordWriter"):
        w.write(b"b")
    w.close()
    assert list(read_records(tmp_path / "x")) == [b"a"]


def test_in_place_replaces_an_existing_file(tmp_path):
    path = write(tmp_path / "a.tfrecord", [b"old", b"older"])
    with RecordWriter(path, atomic=False) as w:
        assert path.stat().st_size == 0
        w.write(b"new")
    assert list(read_records(path)) == [b"new"]


@COMPRESSIONS
def test_in_place_failure_keeps_the_records_written(tmp_path, compression):
    """An error in the block ends the file after the records written (compressed
    stream completed), unlike the atomic mode, which leaves nothing."""
    path = tmp_path / "a"
    with pytest.raises(RuntimeError):
        with RecordWriter(path, compression=compression, atomic=False) as w:
            w.write(b"kept")
            raise RuntimeError("boom")
    assert list(read_records(path, compression=compression)) == [b"kept"]
    assert w.records == 1 and "closed" in repr(w) and "atomic=False" in repr(w)


def test_in_place_writer_dropped_open_warns_and_keeps_its_records(tmp_path):
    import gc

    path = tmp_path / "a"
    w = RecordWriter(path, compression="gzip", atomic=False)
    w.write(b"kept")
    with pytest.warns(ResourceWarning, match="its records so far are kept"):
        del w
        gc.collect()
    assert list(read_records(path)) == [b"kept"]


def test_in_place_with_an_index(tmp_path):
    from tfrecord_torch import IndexedReader

    path = tmp_path / "a.tfrecord"
    with RecordWriter(path, atomic=False, index=True) as w:
        for i in range(5):
            w.write(bytes([i]) * i)
    assert [IndexedReader(path)[i] for i in range(5)] == [bytes([i]) * i for i in range(5)]


def test_in_place_needs_a_local_path(tmp_path):
    with pytest.raises(ValueError, match="atomic=False writes in place, which needs a local path"):
        RecordWriter("s3://bucket/a.tfrecord", atomic=False)
    with pytest.raises(ValueError, match="atomic must be True or False"):
        RecordWriter(tmp_path / "a", atomic="no")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("options", [CompressionOptions(level=0), CompressionOptions(level=9, mem_level=1),
                                     CompressionOptions(window_bits=8, strategy="huffman_only"),
                                     CompressionOptions(level=1, window_bits=12, strategy="rle"),
                                     CompressionOptions(strategy="fixed"), CompressionOptions(strategy="filtered")])
def test_compression_options_write_standard_streams(tmp_path, compression, options):
    payloads = [b"abc" * 1000, bytes(range(256)) * 40, b""]
    path = tmp_path / "a"
    with RecordWriter(path, compression=compression, compression_options=options) as w:
        for p in payloads:
            w.write(p)
    raw = path.read_bytes()
    plain = gzip.decompress(raw) if compression == "gzip" else zlib.decompress(raw)
    assert plain == b"".join(frame(p) for p in payloads)
    assert list(read_records(path)) == payloads


def test_compression_level_changes_the_size(tmp_path):
    payloads = [b"the same words again and again " * 2000]
    sizes = {}
    for level in (0, 1, 9):
        path = tmp_path / f"l{level}"
        with RecordWriter(path, compression="zlib", compression_options=CompressionOptions(level=level)) as w:
            for p in payloads:
                w.write(p)
        sizes[level] = path.stat().st_size
    assert sizes[0] > len(payloads[0]) > sizes[1] > sizes[9]


@pytest.mark.parametrize("field, value, message", [
    ("level", 10, r"level must be an int in \[-1, 9\], got 10"),
    ("level", 2.0, "level must be an int"),
    ("window_bits", 16, r"window_bits must be an int in \[8, 15\]"),
    ("window_bits", 7, "window_bits must be"),
    ("mem_level", 0, r"mem_level must be an int in \[1, 9\]"),
    ("strategy", "best", "strategy must be one of .*'huffman_only'"),
    ("strategy", 9, "strategy must be one of"),
])
def test_compression_options_refuse_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        CompressionOptions(**{field: value})


def test_compression_options_take_zlib_constants_and_need_a_compression(tmp_path):
    assert CompressionOptions(strategy=zlib.Z_FILTERED) == CompressionOptions(strategy="filtered")
    with pytest.raises(ValueError, match="compression_options needs compression='gzip' or 'zlib'"):
        RecordWriter(tmp_path / "a", compression_options=CompressionOptions(level=1))
    with pytest.raises(TypeError, match="compression_options must be a CompressionOptions"):
        RecordWriter(tmp_path / "a", compression="gzip", compression_options={"level": 1})
    assert os.listdir(tmp_path) == []
