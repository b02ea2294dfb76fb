"""TFRecord framing: reading and writing records.

Each record on disk is::

    uint64 length          little-endian
    uint32 masked_crc32c(length bytes)
    byte   payload[length]
    uint32 masked_crc32c(payload)

The reader works a block (1 MiB) at a time: it walks the lengths, then checks
the CRCs of the whole block with numpy and one C call per payload; records
larger than a quarter block are read on their own. A length is acted on only
after its CRC passes and it fits in what is left of the file.
"""

from __future__ import annotations

import os
import struct
import tempfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator, NamedTuple

import numpy as np
from crc32c import crc32c

from .crc import crc32c_rows, mask_array, masked_crc32c
from . import fs
from .errors import CorruptRecordError
from .streams import Stream, check_compression, open_stream

__all__ = ["Chunk", "RecordWriter", "iter_chunks", "parse_frame", "read_records"]

HEADER = struct.Struct("<QI")
HEADER_SIZE = 12
OVERHEAD = 16  # header + footer bytes around each payload
BLOCK_SIZE = 1 << 20
_MAX_STEP = 64 << 20  # largest single read of one record's bytes
_LARGE = BLOCK_SIZE // 4  # records this big are read on their own


@dataclass(frozen=True)
class Chunk:
    """Records found in one buffer.

    Payload ``i`` is ``buf[starts[i]:starts[i] + lengths[i]]``; ``offsets[i]``
    is the byte offset of its header in the stream and ``numbers[i]`` its
    record number. The arrays are int64.
    """

    buf: bytes
    starts: np.ndarray
    lengths: np.ndarray
    offsets: np.ndarray
    numbers: np.ndarray  # each record's number in the file (skipped records leave gaps)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def first_record(self) -> int:
        return int(self.numbers[0])

    def payloads(self) -> list[bytes]:
        """Each record's payload as bytes."""
        buf = self.buf
        if len(self.starts) == 1 and self.lengths[0] == len(buf):
            return [buf]
        return [buf[s:e] for s, e in zip(self.starts.tolist(), (self.starts + self.lengths).tolist())]


def read_records(source, *, compression="auto", verify: bool = True, on_error="raise",
                 storage_options: dict | None = None) -> Iterator[bytes]:
    """Yield the payload of each record in a TFRecord file.

    Args:
        source: a path or a binary file object (read from its current position).
        compression: None, "gzip", "zlib", or "auto" to detect it from the
            file's first bytes and suffix (rule in :mod:`tfrecord_torch.streams`).
        verify: check the CRC32C of every length and payload.
        on_error: "raise", "skip" or "warn" (see :mod:`tfrecord_torch.policy`),
            or an :class:`~tfrecord_torch.policy.ErrorPolicy` to read the
            skip counts from afterwards.
        storage_options: fsspec options for URLs (``s3://``, ``gs://``, ...).

    Raises:
        CorruptRecordError: a record is corrupted or truncated; names the file,
            the record's byte offset (in the decompressed stream for a
            compressed file) and its number.
    """
    from .policy import as_policy

    report = as_policy(on_error).reporter()
    stream = open_stream(source, compression, storage_options)  # open now: a missing file fails here
    return _payloads(stream, verify, report)


def _payloads(stream: Stream, verify: bool, report) -> Iterator[bytes]:
    with stream:
        for chunk in iter_chunks(stream, verify=verify, report=report):
            yield from chunk.payloads()


def iter_chunks(stream: Stream, *, verify: bool = True, offset: int = 0, record: int = 0,
                block_size: int = BLOCK_SIZE, report=None) -> Iterator[Chunk]:
    """Yield the records of ``stream`` a buffer at a time.

    ``offset`` and ``record`` say where in the file the stream starts, for
    error messages and :attr:`Chunk.offsets`. Without ``report`` a bad record
    raises CorruptRecordError; with it, ``report(error)`` is called instead and
    a record with a bad payload is skipped, while anything that makes the
    rest untrustworthy (a bad length, truncation, bad compressed data) ends
    the stream.
    """
    try:
        yield from _chunks(stream, verify, offset, record, block_size, report)
    except CorruptRecordError as e:
        if report is None:
            raise
        report(e)


def _chunks(stream: Stream, verify: bool, offset: int, record: int, block_size: int, report):
    limit = None if stream.size is None else offset + stream.size
    read = _checked_reader(stream)
    data = b""
    base = offset  # stream offset of data[0]
    ended = False
    want = block_size
    while True:
        if not ended:
            more = read(want, base, record)  # a failure is pinned on the record that starts data
            ended = not more  # only an empty read ends: a short one may precede a deferred error
            data = data + more if data else more
        want = block_size
        if not data:
            return
        scan = _scan(data, base, record, verify, stream.name, limit, report)
        if len(scan.starts):
            yield Chunk(data, scan.starts, scan.lengths, scan.starts - HEADER_SIZE + base, scan.numbers)
        if scan.error is not None:  # raised after the good records before it, as TensorFlow does
            raise scan.error
        if scan.stopped:  # a bad length ended the stream (reported)
            return
        record += scan.count
        data = data[scan.end:]
        base += scan.end
        need = scan.need
        if not data:
            if ended:
                return
            continue
        if need is not None and need >= _LARGE:
            # Read a large record straight into its own buffer, then read
            # only the next header: no block-sized copies of big payloads.
            chunk = _read_large(read, data, need, base, record, verify, stream.name, report)
            if chunk is not None:
                yield chunk
            record += 1
            base += need
            data = b""
            want = HEADER_SIZE
            continue
        if ended:
            what = "header" if need is None else f"record of {need - OVERHEAD} bytes"
            raise CorruptRecordError(stream.name, base, record,
                                     f"truncated {what}: the data ends after {len(data)} bytes")


def _read_large(read, data: bytes, need: int, base: int, record: int, verify: bool,
                name: str, report=None) -> Chunk | None:
    """Read the rest of one large record whose header (at least) is in ``data``."""
    length = need - OVERHEAD
    head = data[HEADER_SIZE:HEADER_SIZE + length]
    rest = _read_exact(read, length - len(head), base, record, name, need)
    payload = head + rest if head else rest
    footer = data[HEADER_SIZE + length:]
    footer += _read_exact(read, 4 - len(footer), base, record, name, need)
    if verify and masked_crc32c(payload) != int.from_bytes(footer, "little"):
        error = CorruptRecordError(name, base, record, "payload CRC mismatch (data corrupted)")
        if report is None:
            raise error
        report(error)
        return None
    one = np.ones(1, np.int64)
    return Chunk(payload, one * 0, one * length, one * base, one * record)


def _read_exact(read, n: int, base: int, record: int, name: str, need: int) -> bytes:
    """Read n bytes in steps of at most 64 MiB, so memory follows the data
    actually present, whatever a (possibly corrupt) length claims."""
    parts = []
    while n > 0:
        piece = read(min(n, _MAX_STEP), base, record)
        if not piece:
            raise CorruptRecordError(name, base, record,
                                     f"truncated record of {need - OVERHEAD} bytes: the data ends first")
        parts.append(piece)
        n -= len(piece)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _checked_reader(stream: Stream):
    """``stream.read`` with decompression failures turned into CorruptRecordError."""

    def read(n: int, at: int, rec: int) -> bytes:
        try:
            return stream.read(n)
        except (zlib.error, EOFError) as e:
            raise CorruptRecordError(stream.name, at, rec,
                                     f"{stream.compression} data is invalid: {e}") from e

    return read


class _Scan(NamedTuple):
    starts: np.ndarray  # payload starts of the good records
    numbers: np.ndarray  # their record numbers
    lengths: np.ndarray
    count: int  # records scanned, good or skipped
    end: int  # position after the last complete record
    need: int | None  # framed size of the incomplete record at ``end`` (None: header incomplete)
    stopped: bool  # a bad record ended the scan
    error: CorruptRecordError | None = None  # to raise once the good records before it are out


def _scan(data: bytes, base: int, record: int, verify: bool, name: str, limit: int | None,
          report=None) -> _Scan:
    """Find the complete records at the start of ``data``.

    Walks the lengths first (a lean loop, or one numpy step over a run of
    equal headers), then checks every CRC of the batch at once, so a bad
    length is reported as such before anything acts on it.
    """
    n = len(data)
    pos = 0
    run = np.zeros(0, np.int64)
    if n >= HEADER_SIZE:
        framed = _LENGTH.unpack_from(data, 0)[0] + OVERHEAD
        if framed <= n // 2:
            count = _equal_run(data, framed, n // framed)
            run = np.arange(0, count * framed, framed, dtype=np.int64)
            pos = count * framed
    heads = []
    unpack = _LENGTH.unpack_from
    while n - pos >= HEADER_SIZE:
        end = pos + unpack(data, pos)[0] + OVERHEAD
        if end > n:
            break
        heads.append(pos)
        pos = end
    heads = np.concatenate([run, np.array(heads, np.int64)]) if heads else run
    lengths = _lengths(data, heads)
    keep, stop, error = (np.ones(len(heads), bool), None, None) if not verify else \
        _verify(data, heads, lengths, base, record, name, report)
    numbers = np.flatnonzero(keep).astype(np.int64) + record
    good = heads[keep]
    if stop is not None:
        return _Scan(good + HEADER_SIZE, numbers, lengths[keep], stop, 0, None, True, error)
    need = None
    if n - pos >= HEADER_SIZE:
        number = record + len(heads)
        length, length_crc = HEADER.unpack_from(data, pos)
        error = None
        if verify and masked_crc32c(data[pos:pos + 8]) != length_crc:
            error = CorruptRecordError(name, base + pos, number, "length CRC mismatch (header corrupted)")
        elif limit is not None and base + pos + length + OVERHEAD > limit:
            error = CorruptRecordError(name, base + pos, number,
                                       f"truncated record: its length {length} runs past "
                                       f"the end of the data at byte {limit}")
        if error is not None:
            if report is not None:
                report(error)
                error = None
            return _Scan(good + HEADER_SIZE, numbers, lengths[keep], len(heads), pos, None, True, error)
        need = length + OVERHEAD
    return _Scan(good + HEADER_SIZE, numbers, lengths[keep], len(heads), pos, need, False)


_LENGTH = struct.Struct("<Q")
_ARANGE8 = np.arange(8)


def _lengths(data: bytes, heads: np.ndarray) -> np.ndarray:
    if not len(heads):
        return np.zeros(0, np.int64)
    arr = np.frombuffer(data, np.uint8)
    return np.ascontiguousarray(arr[heads[:, None] + _ARANGE8]).view("<u8").ravel().astype(np.int64)


def _u32s(arr: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr[at[:, None] + _ARANGE8[:4]]).view("<u4").ravel()


def _verify(data: bytes, heads: np.ndarray, lengths: np.ndarray, base: int, record: int,
            name: str, report=None) -> tuple[np.ndarray, int | None, CorruptRecordError | None]:
    """Check the length and payload CRCs of the records at ``heads``.

    Returns which records to keep, the index of the record that ends the
    scan (a bad length; without ``report``, any bad record) or None, and
    without ``report`` the error to raise once the records before it are out.
    """
    keep = np.ones(len(heads), bool)
    if not len(heads):
        return keep, None, None
    arr = np.frombuffer(data, np.uint8)
    header_crcs = mask_array(crc32c_rows(arr[heads[:, None] + _ARANGE8]))
    bad_header = np.flatnonzero(header_crcs != _u32s(arr, heads + 8))
    stop = int(bad_header[0]) if len(bad_header) else len(heads)
    checked = heads[:stop]  # past a bad length, offsets are meaningless
    view = memoryview(data)
    starts = (checked + HEADER_SIZE).tolist()
    ends = (checked + HEADER_SIZE + lengths[:stop]).tolist()
    payload_crcs = mask_array(np.array([crc32c(view[a:b]) for a, b in zip(starts, ends)], np.uint32))
    bad_payload = np.flatnonzero(payload_crcs != _u32s(arr, checked + HEADER_SIZE + lengths[:stop]))
    errors = [CorruptRecordError(name, base + int(heads[i]), record + int(i),
                                 "payload CRC mismatch (data corrupted)") for i in bad_payload]
    if stop < len(heads):
        errors.append(CorruptRecordError(name, base + int(heads[stop]), record + stop,
                                         "length CRC mismatch (header corrupted)"))
    if report is None and errors:
        first = errors[0]
        keep[first.record - record:] = False
        return keep, first.record - record, first
    for error in errors:
        report(error)
    keep[bad_payload] = False
    keep[stop:] = False
    return keep, (stop if stop < len(heads) else None), None


def _equal_run(data: bytes, framed: int, count: int) -> int:
    """How many records from the start have a header equal to the first's."""
    rows = np.frombuffer(data, np.uint8, count * framed).reshape(count, framed)
    same = (rows[:, :HEADER_SIZE] == rows[0, :HEADER_SIZE]).all(axis=1)
    return count if same.all() else int(np.argmin(same))


def parse_frame(data: bytes, *, name: str, offset: int, record: int, verify: bool = True) -> bytes:
    """Check one framed record (header, payload, footer) and return its payload."""
    if len(data) < OVERHEAD:
        raise CorruptRecordError(name, offset, record,
                                 f"truncated record: {len(data)} bytes, fewer than the 16 of a frame")
    length, length_crc = HEADER.unpack_from(data, 0)
    if verify and masked_crc32c(data[:8]) != length_crc:
        raise CorruptRecordError(name, offset, record, "length CRC mismatch (header corrupted)")
    if length + OVERHEAD != len(data):
        raise CorruptRecordError(name, offset, record,
                                 f"record length {length} does not fit its frame of {len(data)} bytes")
    payload = data[HEADER_SIZE:HEADER_SIZE + length]
    footer = data[HEADER_SIZE + length:]
    if verify and masked_crc32c(payload) != int.from_bytes(footer, "little"):
        raise CorruptRecordError(name, offset, record, "payload CRC mismatch (data corrupted)")
    return payload


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def frame(payload) -> bytes:
    """The framed bytes of one record."""
    length = struct.pack("<Q", len(payload))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), payload,
                     struct.pack("<I", masked_crc32c(payload))))


class RecordWriter:
    """Write records to a TFRecord file.

    The file is written under a temporary name in the same folder and renamed
    to ``path`` only when the writer closes without error, so an interrupted
    write never leaves a file that looks complete (a failed one leaves nothing).
    For a URL (``s3://...``) the file is written to a local temporary file and
    uploaded when closed: no object appears under the name before that.

    Args:
        path: the file to create (replaced if it exists), or a binary file
            object to write to (then no renaming happens).
        compression: None, "gzip" or "zlib" (as TensorFlow's
            TFRecordOptions compression_type).
        index: also write ``<path>.index`` while writing (uncompressed files
            only); it is in place before the data file appears.

    Example:
        >>> with RecordWriter("data.tfrecord") as w:
        ...     w.write(b"payload")
    """

    def __init__(self, path, *, compression=None, index: bool = False,
                 storage_options: dict | None = None) -> None:
        self.compression = check_compression(compression, allow_auto=False)
        if index and (self.compression is not None or hasattr(path, "write")):
            raise ValueError("index=True needs an uncompressed file written by path")
        self.records = 0
        self.offset = 0  # bytes of framed records written (before compression)
        self._index: list[int] | None = [] if index else None
        self._final = None
        self._storage_options = storage_options
        if hasattr(path, "write"):
            self._file: BinaryIO = path
            self._owned = False
        else:
            self._final = os.fspath(path)
            if fs.is_url(self._final):  # written locally, uploaded whole on close
                folder, base = None, os.path.basename(self._final)
            else:
                self._final = fs.local(self._final)
                folder, base = os.path.split(os.path.abspath(self._final))
            fd, self._temp = tempfile.mkstemp(prefix=f".{base}.", suffix=".partial", dir=folder)
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
            self._file = os.fdopen(fd, "wb")
            self._owned = True
        self._zip = None
        if self.compression is not None:
            wbits = 16 + zlib.MAX_WBITS if self.compression == "gzip" else zlib.MAX_WBITS
            self._zip = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, wbits)
        self._closed = False

    @property
    def path(self) -> str | None:
        """The final path (None when writing to a file object)."""
        return self._final

    def write(self, payload) -> int:
        """Append one record; returns the stream offset of its header."""
        if self._closed:
            raise ValueError("write to a closed RecordWriter")
        data = frame(memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload)
        at = self.offset
        self._file.write(self._zip.compress(data) if self._zip else data)
        self.offset += len(data)
        self.records += 1
        if self._index is not None:
            self._index.append(len(data))
        return at

    def close(self) -> None:
        """Finish the file: flush, sync and move it to its final name."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._zip is not None:
                self._file.write(self._zip.flush())
            self._file.flush()
            if self._owned:
                os.fsync(self._file.fileno())
                self._file.close()
                if self._index is not None:
                    from .index import default_index_path, write_index

                    sizes = np.array(self._index, np.int64)
                    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(sizes) else sizes
                    write_index(np.stack([offsets, sizes], axis=1).reshape(-1, 2),
                                default_index_path(self._final), storage_options=self._storage_options)
                if fs.is_url(self._final):
                    fs.upload(self._temp, self._final, self._storage_options)
                    os.unlink(self._temp)
                else:
                    os.replace(self._temp, self._final)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop writing and remove the partial file (a file object is left as is)."""
        self._closed = True
        if self._owned:
            self._file.close()
            try:
                os.unlink(self._temp)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        # Dropped without close(): never promote a possibly partial file.
        if getattr(self, "_owned", False) and not getattr(self, "_closed", True):
            self.abort()
