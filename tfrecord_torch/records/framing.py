"""TFRecord framing: reading records (:mod:`tfrecord_torch.records.writer` writes them).

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

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
from crc32c import crc32c

from tfrecord_torch._types import CompressionArg, PathLike
from tfrecord_torch.errors import CorruptRecordError, StaleIndexError
from tfrecord_torch.policy import OnError, as_policy
from tfrecord_torch.records.crc import masked_crc32c
from tfrecord_torch.records.scan import GROWING, HEADER, HEADER_SIZE, OVERHEAD
from tfrecord_torch.records.scan import scan as find_records
from tfrecord_torch.records.sniff import not_tfrecord
from tfrecord_torch.records.streams import Stream, open_stream

__all__ = ["Chunk", "iter_chunks", "parse_frame", "read_records"]


BLOCK_SIZE = 1 << 20
_MAX_STEP = 64 << 20  # largest single read of one record's bytes
_LARGE = BLOCK_SIZE // 4  # records this big are read on their own
_HEADER_CRCS: dict[int, int] = {}  # record length -> its masked length CRC, for parse_frame
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8  # as records/crc.py; parse_frame masks inline, one call fewer per record


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
    sliced: list | None = field(default=None, repr=False, compare=False)  # the payloads, if cut already

    def __len__(self) -> int:
        return len(self.starts)

    def payloads(self) -> list[bytes]:
        """Each record's payload as bytes."""
        if self.sliced is not None:
            return self.sliced
        buf = self.buf
        if len(self.starts) == 1 and self.lengths[0] == len(buf):
            return [buf]
        return [buf[s:e] for s, e in zip(self.starts.tolist(), (self.starts + self.lengths).tolist())]


def read_records(source: PathLike | BinaryIO, *, compression: CompressionArg = "auto", verify: bool = True,
                 on_error: OnError = "raise",
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

    A file still being written (a partial last record is expected, more comes
    later) is read with :class:`~tfrecord_torch.records.RecordTail` instead.
    """

    report = as_policy(on_error).reporter()
    stream = open_stream(source, compression, storage_options)  # open now: a missing file fails here
    return _payloads(stream, verify, report)


def _payloads(stream: Stream, verify: bool, report) -> Iterator[bytes]:
    with stream:
        for chunk in iter_chunks(stream, verify=verify, report=report, payloads=True):
            yield from chunk.payloads()


def iter_chunks(stream: Stream, *, verify: bool = True, offset: int = 0, record: int = 0,
                block_size: int = BLOCK_SIZE, report=None, payloads: bool = False) -> Iterator[Chunk]:
    """Yield the records of ``stream`` a buffer at a time.

    ``offset`` and ``record`` say where in the file the stream starts, for
    error messages and :attr:`Chunk.offsets`. With ``payloads``, the chunks
    come with their payloads already cut (each CRC is checked on the very
    bytes handed out), for callers that call :meth:`Chunk.payloads`; without,
    nothing is copied. Without ``report`` a bad record
    raises CorruptRecordError; with it, ``report(error)`` is called instead and
    a record with a bad payload is skipped, while anything that makes the
    rest untrustworthy (a bad length, truncation, bad compressed data) ends
    the stream.
    """
    try:
        yield from _chunks(stream, verify, offset, record, block_size, report, payloads)
    except CorruptRecordError as e:
        if report is None:
            raise
        report(e)


def _chunks(stream: Stream, verify: bool, offset: int, record: int, block_size: int, report,
            payloads: bool = False):
    limit = None if stream.size is None else offset + stream.size
    bound = stream.size is None and stream.bound is not None
    if stream.size is None and stream.bound is not None:
        limit = offset + stream.bound  # a compressed stream: no more than deflate can expand to
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
        if base == 0 and record == 0:  # the file's first header: is it a TFRecord file at all?
            foreign = not_tfrecord(data, stream.compression)
            if foreign is not None:
                error = CorruptRecordError(stream.name, 0, 0, foreign)
                if report is None:
                    raise error
                report(error)
                return
        scan = find_records(data, base, record, verify, stream.name, limit, report, payloads, bound=bound)
        if len(scan.starts):
            yield Chunk(data, scan.starts, scan.lengths, scan.starts - HEADER_SIZE + base, scan.numbers,
                        scan.payloads)
        if scan.error is not None:  # raised after the good records before it, as TensorFlow does
            raise scan.error
        if scan.stopped:  # a bad length ended the stream (reported)
            return
        record += scan.scanned
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
                                     f"truncated {what}: the data ends after {len(data)} bytes{GROWING}")


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
                                     f"truncated record of {need - OVERHEAD} bytes: the data ends first{GROWING}")
        parts.append(piece)
        n -= len(piece)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _checked_reader(stream: Stream):
    """``stream.read`` with decompression failures turned into CorruptRecordError."""

    def read(n: int, at: int, rec: int) -> bytes:
        try:
            return stream.read(n)
        except (zlib.error, EOFError) as e:
            growing = GROWING if isinstance(e, EOFError) else ""  # the stream ends before its end marker
            raise CorruptRecordError(stream.name, at, rec,
                                     f"{stream.compression} data is invalid: {e}{growing}") from e

    return read


def parse_frame(data: bytes, *, name: str, offset: int, record: int, verify: bool = True) -> bytes:
    """Check one framed record (header, payload, footer) and return its payload."""
    if len(data) < OVERHEAD:
        raise CorruptRecordError(name, offset, record,
                                 f"truncated record: {len(data)} bytes, fewer than the 16 of a frame")
    length, length_crc = HEADER.unpack_from(data, 0)
    if length + OVERHEAD != len(data):
        if verify and masked_crc32c(data[:8]) != length_crc:
            raise CorruptRecordError(name, offset, record, "length CRC mismatch (header corrupted)")
        if verify and length + OVERHEAD < len(data):  # a sound header, a shorter record: a wrong frame size
            raise StaleIndexError(name, offset, record, f"the index gives a frame of {len(data)} bytes, but "
                                  f"the record there is {length + OVERHEAD} bytes (its length CRC is valid)")
        raise CorruptRecordError(name, offset, record,
                                 f"record length {length} does not fit its frame of {len(data)} bytes "
                                 f"(the file was cut short, or its index is stale)")
    if verify and _HEADER_CRCS.get(length) != length_crc:
        if masked_crc32c(data[:8]) != length_crc:
            raise CorruptRecordError(name, offset, record, "length CRC mismatch (header corrupted)")
        if len(_HEADER_CRCS) < 4096:  # a length's CRC is always the same: remember a few
            _HEADER_CRCS[length] = length_crc
    payload = data[HEADER_SIZE:HEADER_SIZE + length]
    if verify:
        crc = crc32c(payload)
        if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF != _FOOTER.unpack_from(data, HEADER_SIZE + length)[0]:
            raise CorruptRecordError(name, offset, record, "payload CRC mismatch (data corrupted)")
    return payload
