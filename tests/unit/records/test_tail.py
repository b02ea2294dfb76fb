"""RecordTail: following a file while it grows. Every cut of a file (inside a
header, a payload, a footer, a compressed block) yields the records complete
before the cut, reports the rest as pending, and goes on from the same record
once the file is completed; a corrupt complete record raises, again and again;
a reader thread follows a writer thread record for record. A path is
followed by name: a file that replaces it is read from its start after the
old one's end (a reader thread follows a rotating writer), and a file
truncated, or truncated and written again, raises on every try."""

import gzip
import io
import os
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


def write_flushing(writer, payloads) -> None:
    """Writes ``payloads``, flushing after every seventh, so a reader sees the file grow in steps."""
    for i, p in enumerate(payloads):
        writer.write(p)
        if i % 7 == 0:
            writer.flush()


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
                write_flushing(w, payloads)
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


def write_in_place(path, payloads, compression=None):
    """What a writer that opens ``path`` again leaves: the file truncated and written from its start."""
    with RecordWriter(path, compression=compression, atomic=False) as w:
        for p in payloads:
            w.write(p)


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
@pytest.mark.parametrize("keep", [0, 30])
def test_a_truncated_file_raises_naming_the_file_and_offset(tmp_path, compression, keep):
    """A file cut below what the tail read of it never yields garbage or
    stops as if the writer were slow: it raises, on every try."""
    path = tmp_path / "events"
    write_in_place(path, PAYLOADS, compression)
    tail = RecordTail(path)
    assert list(tail) == PAYLOADS
    os.truncate(path, keep)
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match=rf"the file was truncated: it is {keep} bytes long") as e:
            next(tail)
        assert e.value.path == str(path)
        assert (e.value.offset, e.value.record) == (sum(len(frame(p)) for p in PAYLOADS), len(PAYLOADS))
        assert "open a new RecordTail" in str(e.value)
    with pytest.raises(CorruptRecordError, match="truncated"):
        tail.raise_if_truncated()


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_a_file_written_again_in_place_raises(tmp_path, compression):
    """A writer that opens the path again (``atomic=False`` here, TensorFlow's
    writer too) truncates the same file and writes it from its start; once it
    has written past the tail's place, the tail raises instead of handing out
    the new records after that place as if they followed the old ones."""
    path = tmp_path / "events"
    first = [b"run 1, step %d" % i for i in range(3)]
    write_in_place(path, first, compression)
    tail = RecordTail(path, compression=compression)
    assert list(tail) == first
    inode = os.stat(path).st_ino
    second = [b"run 2, step %d" % i for i in range(6)]  # the same sizes: the framing lines up
    write_in_place(path, second, compression)
    assert os.stat(path).st_ino == inode
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="truncated and written again") as e:
            next(tail)
        assert (e.value.path, e.value.record) == (str(path), 3)
    assert list(RecordTail(path)) == second


@pytest.mark.parametrize("publish", ["rename away, then a new file", "a new file renamed over it"])
def test_a_replaced_file_is_followed_from_its_start(tmp_path, publish):
    """Log-style rotation and an atomic publish both put a new file under the
    name: the tail reads the old one to its end, then the new one from its
    start (compression detected again), as read_records reads the two files."""
    path = tmp_path / "events"
    old = RecordWriter(path, atomic=False)
    old.write(b"a1")
    old.write(b"a2")
    old.flush()
    tail = RecordTail(path)
    assert list(tail) == [b"a1", b"a2"]
    old.write(b"a3")  # written after the tail's last look, before the rotation
    old.close()
    if publish == "rename away, then a new file":
        os.rename(path, tmp_path / "events.1")
        assert list(tail) == [b"a3"]  # nothing under the name yet: the old file stays open
        new = RecordWriter(path, compression="gzip", atomic=False)
        new.write(b"b1")
        new.flush()
    else:
        os.link(path, tmp_path / "events.1")  # kept, for the oracle below
        new = RecordWriter(tmp_path / "staged", compression="gzip", atomic=False)
        new.write(b"b1")
        new.flush()
        os.rename(tmp_path / "staged", path)
    assert list(tail) == ([b"b1"] if publish == "rename away, then a new file" else [b"a3", b"b1"])
    assert (tail.replacements, tail.records, tail.compression) == (1, 1, "gzip")
    new.write(b"b2")
    new.close()
    assert list(tail) == [b"b2"] and tail.offset == len(frame(b"b1")) + len(frame(b"b2"))
    tail.raise_if_truncated()
    tail.close()
    assert list(read_records(tmp_path / "events.1")) == [b"a1", b"a2", b"a3"]
    assert list(read_records(path)) == [b"b1", b"b2"]


def test_a_replaced_file_that_ends_inside_a_record_raises(tmp_path):
    path = tmp_path / "events"
    path.write_bytes(frame(b"whole") + frame(b"cut")[:-3])
    tail = RecordTail(path)
    assert list(tail) == [b"whole"]
    os.rename(path, tmp_path / "events.1")
    path.write_bytes(frame(b"new"))
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="record 1 at byte offset 21: truncated record: a new file "
                                                     "took the name, and the old one ends 16 bytes into this record"):
            list(tail)


def test_raise_if_truncated_keeps_the_old_files_records_when_replaced(tmp_path):
    path = tmp_path / "events"
    path.write_bytes(frame(b"a1"))
    tail = RecordTail(path)
    assert list(tail) == [b"a1"]
    with open(path, "ab") as f:
        f.write(frame(b"a2") + frame(b"a3"))
    os.rename(path, tmp_path / "events.1")
    path.write_bytes(frame(b"b1"))
    tail.raise_if_truncated()
    assert list(tail) == [b"a2", b"a3", b"b1"] and tail.replacements == 1


def test_a_reader_thread_follows_a_rotating_writer(tmp_path):
    """The writer rotates log-style (closes the file, renames it to
    ``events.<k>``, starts a new one) once the reader follows the current one;
    the reader gets every record of every file once, in order."""
    path = tmp_path / "events"
    files = [[f"file {k} event {i}".encode() * (1 + i % 9) for i in range(300)] for k in range(4)]
    finished = threading.Event()
    errors: list[BaseException] = []
    tail_box: list[RecordTail] = []

    def write():
        try:
            for k, payloads in enumerate(files):
                while k and tail_box[0].replacements < k - 1:  # the reader must see each file under the name
                    time.sleep(0.001)
                if k:
                    os.rename(path, tmp_path / f"events.{k - 1}")
                with RecordWriter(path, compression="gzip" if k % 2 else None, atomic=False) as w:
                    if not k:
                        tail_box.append(RecordTail(path))
                    write_flushing(w, payloads)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            finished.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not tail_box and not finished.is_set():
        time.sleep(0.001)
    seen: list[bytes] = []
    with tail_box[0] as tail:
        while True:
            done = finished.is_set()
            seen.extend(tail)
            if done:
                break
            time.sleep(0.001)
        tail.raise_if_truncated()
        assert tail.replacements == len(files) - 1
    writer.join()
    assert not errors
    assert seen == [p for payloads in files for p in payloads]


def test_a_file_written_again_between_the_check_and_the_read_raises(tmp_path):
    """The tail compares the file with what it read before each read; a
    writer that truncates and writes the file again right after that check
    is caught after the read, before any of the new bytes are handed out."""
    path = tmp_path / "events"
    first = [b"run 1, step %d" % i for i in range(3)]
    second = [b"run 2, step %d" % i for i in range(6)]  # the same sizes: the framing lines up
    write_in_place(path, first)
    tail = RecordTail(path)
    assert list(tail) == first
    followed = tail._followed
    opened = followed.file

    class WrittenAgainBeforeTheRead:
        def read(self, size):
            write_in_place(path, second)
            followed.file = opened
            return opened.read(size)

        def fileno(self):
            return opened.fileno()

    followed.file = WrittenAgainBeforeTheRead()
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="truncated and written again"):
            next(tail)  # not run 2's record 3, as if it followed run 1's record 2


def test_reads_that_come_back_short_are_not_taken_for_a_file_written_again(tmp_path, monkeypatch):
    """Before each read the tail compares the ends of what it read with the
    file; a positioned read that returns fewer bytes than asked (FUSE, NFS)
    is read on, not taken for other bytes there."""
    path = tmp_path / "events"
    first = [b"step %d" % i * 40 for i in range(3)]
    write_in_place(path, first)
    tail = RecordTail(path)
    assert list(tail) == first
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: real(fd, min(n, 10), at))  # 10 bytes a call at most
    more = [b"step %d" % i * 40 for i in range(3, 6)]
    with open(path, "ab") as f:
        for p in more:
            f.write(frame(p))
    assert list(tail) == more
