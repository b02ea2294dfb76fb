"""TFRecord framing: records read back as written, plain and compressed, from
files and streams; corruption and truncation found at the record they hit."""

import gzip
import io
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_torch import CorruptRecordError, RecordWriter, read_records
from tfrecord_torch.records.crc import masked_crc32c
from tfrecord_torch.records.writer import frame


def write(path, payloads, compression=None):
    with RecordWriter(path, compression=compression) as w:
        for p in payloads:
            w.write(p)
    return path


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_round_trip_mixed_sizes(tmp_path, compression):
    rng = np.random.default_rng(0)
    sizes = [0, 1, 7, 100, 100, 100, 100, 100, 100, 100, 100, 100, 3, 300_000, 2_000_000, 0, 5]
    sizes += [64] * 5000  # equal-length runs take the numpy path
    payloads = [rng.bytes(n) for n in sizes]
    path = write(tmp_path / "a.tfrecord", payloads, compression)
    assert list(read_records(path)) == payloads
    assert list(read_records(path, compression=compression)) == payloads
    assert list(read_records(path, verify=False)) == payloads


def test_file_objects_and_non_seekable_streams(tmp_path):
    payloads = [b"x" * n for n in range(50)]
    path = write(tmp_path / "a.tfrecord", payloads)
    with open(path, "rb") as f:
        assert list(read_records(f)) == payloads

    class Pipe(io.RawIOBase):  # no seek, short reads
        def __init__(self, data):
            self.data = data

        def readable(self):
            return True

        def read(self, n=-1):
            n = min(n, 13)
            out, self.data = self.data[:n], self.data[n:]
            return out

    assert list(read_records(Pipe(path.read_bytes()))) == payloads
    gz = gzip.compress(path.read_bytes())
    assert list(read_records(Pipe(gz))) == payloads


def test_concatenated_gzip_members(tmp_path):
    a, b = frame(b"one"), frame(b"two")
    path = tmp_path / "cat.tfrecord.gz"
    path.write_bytes(gzip.compress(a) + gzip.compress(b))
    assert list(read_records(path)) == [b"one", b"two"]


def test_detection_prefers_header_check_over_magic(tmp_path):
    # A record whose length bytes start like a GZIP magic must not fool "auto".
    payload = b"z" * 0x8B1F
    path = write(tmp_path / "tricky.gz", [payload])
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert list(read_records(path)) == [payload]


def test_empty_file(tmp_path):
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    assert list(read_records(path)) == []
    assert list(read_records(write(tmp_path / "e.gz", [], "gzip"))) == []


@settings(max_examples=60, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=40),
       compression=st.sampled_from([None, "gzip", "zlib"]))
def test_property_round_trip(tmp_path_factory, payloads, compression):
    path = tmp_path_factory.mktemp("p") / "r.tfrecord"
    write(path, payloads, compression)
    assert list(read_records(path)) == payloads


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="compression must be one of"):
        read_records(tmp_path / "x", compression="lz4")
    with pytest.raises(ValueError, match="compression must be one of"):
        RecordWriter(tmp_path / "x", compression="auto")
    with pytest.raises(FileNotFoundError):
        read_records(tmp_path / "missing")
    with pytest.raises(TypeError, match="path or a binary file object"):
        read_records(42)


# --- corruption -----------------------------------------------------------
# The timeout marks guard against hangs (a corrupt length must fail at once,
# not wait for data); they are not performance assertions.
pytestmark = pytest.mark.timeout(120)

def expect_corrupt(path, offset=None, record=None, **kw):
    with pytest.raises(CorruptRecordError) as info:
        list(read_records(path, **kw))
    err = info.value
    assert err.path == str(path)
    assert str(path) in str(err) and f"byte offset {err.offset}" in str(err)
    if offset is not None:
        assert err.offset == offset
    if record is not None:
        assert err.record == record
    return err


@pytest.mark.parametrize("count", [3, 40])  # 40 equal records take the numpy path
def test_flipped_bit_in_payload(tmp_path, count):
    payloads = [bytes([i]) * 20 for i in range(count)]
    path = write(tmp_path / "a.tfrecord", payloads)
    data = bytearray(path.read_bytes())
    victim = count - 2
    data[victim * 36 + 12 + 5] ^= 0x10
    path.write_bytes(bytes(data))
    err = expect_corrupt(path, offset=victim * 36, record=victim)
    assert "payload CRC" in err.reason
    assert len(list(read_records(path, verify=False))) == count


@pytest.mark.parametrize("byte", [0, 3, 7, 8, 11])
def test_flipped_bit_in_header(tmp_path, byte):
    path = write(tmp_path / "a.tfrecord", [b"a" * 10, b"b" * 10, b"c" * 10])
    data = bytearray(path.read_bytes())
    data[26 + byte] ^= 0x01
    path.write_bytes(bytes(data))
    err = expect_corrupt(path, offset=26, record=1)
    assert "length CRC" in err.reason or "truncated" in err.reason


def test_flipped_footer(tmp_path):
    path = write(tmp_path / "a.tfrecord", [b"a" * 10])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x80
    path.write_bytes(bytes(data))
    expect_corrupt(path, offset=0, record=0)


def test_truncation_at_every_position(tmp_path):
    payloads = [b"", b"abc", b"x" * 40, b"yz"]
    full = (write(tmp_path / "full.tfrecord", payloads)).read_bytes()
    ends = np.cumsum([0] + [len(p) + 16 for p in payloads])
    for cut in range(1, len(full)):
        path = tmp_path / "cut.tfrecord"
        path.write_bytes(full[:cut])
        if cut in ends:
            k = list(ends).index(cut)
            assert list(read_records(path)) == payloads[:k]
            continue
        record = int(np.searchsorted(ends, cut, side="right")) - 1
        for verify in (True, False):
            err = expect_corrupt(path, offset=int(ends[record]), record=record, verify=verify)
            assert "truncated" in err.reason


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_truncated_compressed_stream(tmp_path, compression):
    path = write(tmp_path / "a.tfrecord", [b"q" * 1000] * 50, compression)
    data = path.read_bytes()
    for cut in (5, len(data) // 2, len(data) - 3):
        path.write_bytes(data[:cut])
        err = expect_corrupt(path, compression=compression)
        assert err.record <= 50


def test_huge_length_fails_at_once(tmp_path):
    length = struct.pack("<Q", 2**60)
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(length + struct.pack("<I", masked_crc32c(length)) + b"x" * 100)
    for verify in (True, False):
        err = expect_corrupt(path, offset=0, record=0, verify=verify)
        assert "runs past the end" in err.reason
    # In a compressed stream the size is unknown: memory must follow the data.
    gz = tmp_path / "huge.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    err = expect_corrupt(gz, offset=0, record=0)
    assert "truncated" in err.reason
    # A 2**64-1 length with a bad CRC and verify=False still cannot overflow.
    path.write_bytes(b"\xff" * 12 + b"x" * 10)
    expect_corrupt(path, verify=False)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes_never_crash(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("r") / "junk.tfrecord"
    path.write_bytes(data)
    try:
        for _ in read_records(path):
            pass
    except CorruptRecordError as err:
        assert 0 <= err.offset <= len(data)


@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(max_size=50), min_size=1, max_size=10), data=st.data())
def test_any_flipped_byte_is_detected(tmp_path_factory, payloads, data):
    path = tmp_path_factory.mktemp("c") / "r.tfrecord"
    write(path, payloads)
    raw = bytearray(path.read_bytes())
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError):
        list(read_records(path))


def test_zlib_garbage_is_a_corrupt_record(tmp_path):
    path = tmp_path / "bad.zz"
    path.write_bytes(b"\x78\x9c" + b"\x00garbage" * 10)
    err = expect_corrupt(path)
    assert "zlib data is invalid" in err.reason


def test_corrupt_error_pickles():
    import pickle

    err = CorruptRecordError("f.tfrecord", 10, 2, "bad")
    again = pickle.loads(pickle.dumps(err))
    assert (again.path, again.offset, again.record, again.reason) == ("f.tfrecord", 10, 2, "bad")
    assert str(again) == str(err)


def test_gzip_bomb_streams_with_bounded_memory(tmp_path):
    import tracemalloc

    path = tmp_path / "bomb.gz"
    record = frame(bytes(1 << 20))
    with gzip.open(path, "wb") as f:
        for _ in range(256):  # 256 MiB inflated, a few hundred KB on disk
            f.write(record)
    assert path.stat().st_size < 2 << 20
    tracemalloc.start()
    count = sum(1 for _ in read_records(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 256
    assert peak < 32 << 20


@pytest.mark.parametrize("count", [10, 3000])
def test_good_records_before_a_bad_one_are_yielded(tmp_path, count):
    # As TensorFlow does: records 0..4 come out, then the error.
    path = write(tmp_path / "a.tfrecord", [bytes([i % 256]) * 30 for i in range(count)])
    raw = bytearray(path.read_bytes())
    raw[5 * 46 + 20] ^= 1
    path.write_bytes(bytes(raw))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for payload in read_records(path):
            got.append(payload)
    assert len(got) == 5 and info.value.record == 5
