"""RecordTail: following a file while it grows. Every cut of a file (inside a
header, a payload, a footer, a compressed block) yields the records complete
before the cut, reports the rest as pending, and goes on from the same record
once the file is completed; a corrupt complete record raises, again and again;
a reader thread follows a writer thread record for record."""

import gzip
import io
import threading
import time
import zlib

import pytest

from tfrecord_torch import CorruptRecordError, RecordTail, RecordWriter, read_records
from tfrecord_torch.records.writer import frame

PAYLOADS = [b"", b"one", b"two" * 300, bytes(range(256)) * 3]
COMPRESS = {None: lambda b: b, "gzip": gzip.compress, "zlib": zlib.compress}


def complete_before(plain: bytes, cut: int) -> int:
    """How many records of PAYLOADS end within the first ``cut`` plain bytes."""
    end, n = 0, 0
    for p in PAYLOADS:
        end += len(frame(p))
        if end > cut:
            break
        n += 1
    return n


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_every_cut_yields_the_complete_records_then_continues(tmp_path, compression):
    plain = b"".join(frame(p) for p in PAYLOADS)
    data = COMPRESS[compression](plain)
    path = tmp_path / "growing"
    step = 1 if compression is None else 3
    for cut in range(0, len(data) + 1, step):
        path.write_bytes(data[:cut])
        with RecordTail(path, compression=compression) as tail:
            first = list(tail)
            # the oracle: the plain bytes the cut compressed data decompresses to
            seen = len(zlib.decompressobj(16 + 15 if compression == "gzip" else 15).decompress(data[:cut])) \
                if compression else cut
            n = complete_before(plain, seen)
            assert first == PAYLOADS[:n], cut
            assert tail.records == n and tail.offset == sum(len(frame(p)) for p in PAYLOADS[:n])
            assert list(tail) == []  # stopping again does not move it
            with open(path, "ab") as f:
                f.write(data[cut:])
            assert list(tail) == PAYLOADS[n:], cut
            assert tail.pending == 0
            tail.raise_if_truncated()


def test_pending_counts_the_bytes_of_a_partial_record(tmp_path):
    path = tmp_path / "a"
    whole = frame(b"good") + frame(b"truncated")
    path.write_bytes(whole[:-1])
    tail = RecordTail(path)
    assert list(tail) == [b"good"]
    assert tail.pending == len(frame(b"truncated")) - 1
    with pytest.raises(CorruptRecordError, match=r"a: record 1 at byte offset 20: truncated record: the data ends 24 bytes into it"):
        tail.raise_if_truncated()
    with open(path, "ab") as f:
        f.write(whole[-1:])
    tail.raise_if_truncated()
    assert list(tail) == [b"truncated"]
    with open(path, "ab") as f:
        f.write(frame(b"whole") + frame(b"cut")[:5])
    with pytest.raises(CorruptRecordError, match="record 3 at byte offset 66: truncated record: the data ends 5 "):
        tail.raise_if_truncated()
    assert list(tail) == [b"whole"] and tail.pending == 5
    with open(path, "ab") as f:
        f.write(frame(b"cut")[5:])
    assert "records=3" in repr(tail) and "pending=5" in repr(tail)
    assert list(tail) == [b"cut"] and tail.pending == 0


@pytest.mark.parametrize("damage, message", [(8, "length CRC mismatch"), (14, "payload CRC mismatch")])
def test_a_corrupt_complete_record_raises_each_time(tmp_path, damage, message):
    path = tmp_path / "a"
    data = bytearray(frame(b"good") + frame(b"bad record"))
    data[20 + damage] ^= 0xFF  # in the second record (the first is 20 bytes)
    path.write_bytes(bytes(data))
    tail = RecordTail(path)
    assert next(tail) == b"good"
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match=message) as e:
            next(tail)
        assert e.value.offset == 20 and e.value.record == 1
    assert list(RecordTail(path, verify=False))[0] == b"good"


def test_invalid_compressed_data_raises(tmp_path):
    path = tmp_path / "a.gz"
    data = bytearray(gzip.compress(frame(b"x" * 1000)))
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="gzip data is invalid"):
        list(RecordTail(path, compression="gzip"))


def test_auto_waits_for_enough_bytes_to_detect(tmp_path):
    path = tmp_path / "a"
    data = zlib.compress(frame(b"payload") * 3)
    path.write_bytes(data[:5])
    tail = RecordTail(path)
    assert list(tail) == [] and tail.compression == "auto" and tail.pending == 5
    with open(path, "ab") as f:
        f.write(data[5:])
    assert list(tail) == [b"payload"] * 3 and tail.compression == "zlib"


def test_concatenated_gzip_members(tmp_path):
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(frame(b"a")) + gzip.compress(frame(b"b")))
    tail = RecordTail(path)
    assert list(tail) == [b"a", b"b"]
    with open(path, "ab") as f:
        f.write(gzip.compress(frame(b"c")))
    assert list(tail) == [b"c"]


def test_file_objects_closing_and_bad_arguments(tmp_path):
    buf = io.BytesIO(frame(b"a"))
    tail = RecordTail(buf, compression=None)
    assert list(tail) == [b"a"]
    buf.write(frame(b"b"))
    buf.seek(len(frame(b"a")))
    assert list(tail) == [b"b"]
    tail.close()
    assert not buf.closed
    with pytest.raises(ValueError, match="read from a closed RecordTail"):
        next(tail)
    with pytest.raises(ValueError, match="local path or a file object"):
        RecordTail("s3://bucket/events.tfrecord")
    with pytest.raises(ValueError, match="compression must be one of"):
        RecordTail(tmp_path / "x", compression="bz2")
    with pytest.raises(FileNotFoundError):
        RecordTail(tmp_path / "missing")


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_reader_thread_follows_a_writer_thread(tmp_path, compression):
    """The writer writes in place and flushes every few records; the reader
    polls and ends up with every record once, in order, as read_records
    reads the finished file."""
    path = tmp_path / "events"
    payloads = [f"event {i}".encode() * (1 + i % 50) for i in range(2000)]
    opened = threading.Event()
    finished = threading.Event()
    errors: list[BaseException] = []

    def write():
        try:
            with RecordWriter(path, compression=compression, atomic=False) as w:
                opened.set()
                for i, p in enumerate(payloads):
                    w.write(p)
                    if i % 7 == 0:
                        w.flush()
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            opened.set()
            finished.set()

    seen: list[bytes] = []
    writer = threading.Thread(target=write)
    writer.start()
    opened.wait()
    with RecordTail(path, compression=compression) as tail:
        while True:
            done = finished.is_set()  # read before the last pass, so that pass sees everything
            seen.extend(tail)
            if done:
                break
            time.sleep(0.001)
        tail.raise_if_truncated()
    writer.join()
    assert not errors
    assert seen == payloads == list(read_records(path))
