"""RecordWriter and the framing of one record: TensorFlow's layout, files that
appear only when closed, buffers, standard compressed output, the usual permissions."""

import gzip
import os
import struct
import zlib

import numpy as np
import pytest

from tfrecord_torch import RecordWriter, read_records
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
