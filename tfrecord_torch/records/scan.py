"""Finding and checking the records in a buffer (the reader's inner loop).

Walks the lengths first (a lean loop, or one numpy step over each run of
equal headers, as fixed-schema data has), then checks every CRC of the buffer
at once: length CRCs with a vectorized table CRC, payload CRCs with one C call
each. So a bad length is reported as such before anything acts on it. Asked
for the payloads, it slices each once and checks the CRC of that slice, so a
reader that yields them pays for one copy per record, not two.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.records.crc import crc32c_rows, mask_array, masked_crc32c

__all__ = ["GROWING", "HEADER", "HEADER_SIZE", "OVERHEAD", "Scan", "scan"]

HEADER = struct.Struct("<QI")
HEADER_SIZE = 12
OVERHEAD = 16  # header + footer bytes around each payload
# Said after a truncation at the end of the data: in a file otherwise sound, the usual cause is a writer
# still appending to it (TensorFlow's writer flushes in the middle of records).
GROWING = ("; if a writer is still appending to the file, follow it with tfrecord_torch.RecordTail(path) "
           "instead, which yields the complete records, stops before a partial last one and goes on from "
           "there when iterated again (docs: Writing, \"Following a growing file\"); if the writer is done, "
           "the file was cut short")


class Scan(NamedTuple):
    starts: np.ndarray  # payload starts of the good records
    numbers: np.ndarray  # their record numbers
    lengths: np.ndarray
    scanned: int  # records scanned, good or skipped
    end: int  # position after the last complete record
    need: int | None  # framed size of the incomplete record at ``end`` (None: header incomplete)
    stopped: bool  # a bad record ended the scan
    error: CorruptRecordError | None = None  # to raise once the good records before it are out
    payloads: list | None = None  # the good records' payloads (bytes), when asked for


def scan(data: bytes, base: int, record: int, verify: bool, name: str, limit: int | None,
         report=None, payloads: bool = False, *, bound: bool = False) -> Scan:
    """Find the complete records at the start of ``data``.

    Walks the lengths first (a lean loop, or one numpy step over each run of
    equal headers), then checks every CRC of the batch at once, so a bad
    length is reported as such before anything acts on it. With ``payloads``
    the good records' payloads come back as bytes in :attr:`Scan.payloads`.
    ``limit`` is where the data ends (with ``bound``, the most it can hold:
    a compressed stream).
    """
    n = len(data)
    heads, pos = _walk(data)
    lengths = _lengths(data, heads)
    pieces = None
    if verify:
        keep, stop, error, pieces = _verify(data, heads, lengths, base, record, name, report, payloads)
    else:
        keep, stop, error = np.ones(len(heads), bool), None, None
    numbers = np.flatnonzero(keep).astype(np.int64) + record
    good = heads[keep]
    if payloads:
        if pieces is None:
            pieces = _slices(data, good + HEADER_SIZE, lengths[keep])
        elif len(pieces) != len(good):
            pieces = [pieces[i] for i in np.flatnonzero(keep[:len(pieces)]).tolist()]
    if stop is not None:
        return Scan(good + HEADER_SIZE, numbers, lengths[keep], stop, 0, None, True, error, pieces)
    need = None
    if n - pos >= HEADER_SIZE:
        record_number = record + len(heads)
        length, length_crc = HEADER.unpack_from(data, pos)
        error = None
        if verify and masked_crc32c(data[pos:pos + 8]) != length_crc:
            error = CorruptRecordError(name, base + pos, record_number,
                                       "length CRC mismatch (header corrupted)")
        elif limit is not None and base + pos + length + OVERHEAD > limit:
            error = CorruptRecordError(name, base + pos, record_number, (
                f"truncated record: its length {length} runs past the end of the data: the compressed file "
                f"decompresses to at most {limit} bytes") if bound else (
                f"truncated record: its length {length} runs past the end of the data at byte {limit}{GROWING}"))
        if error is not None:
            if report is not None:
                report(error)
                error = None
            return Scan(good + HEADER_SIZE, numbers, lengths[keep], len(heads), pos, None, True, error,
                        pieces)
        need = length + OVERHEAD
    return Scan(good + HEADER_SIZE, numbers, lengths[keep], len(heads), pos, need, False, None, pieces)


_RUN = 4  # equal lengths in a row before a numpy step looks for a longer run
_PROBE = 32  # rows a numpy step checks before it checks all the rest
_LENGTH = struct.Struct("<Q")
_ARANGE8 = np.arange(8)


def _walk(data: bytes) -> tuple[np.ndarray, int]:
    """Header offsets of the complete records at the start of ``data``, and
    where the first incomplete one starts."""
    n = len(data)
    pos = 0
    pieces = []
    heads: list[int] = []
    unpack = _LENGTH.unpack_from
    last = streak = 0
    wait = _RUN  # doubles after each short run, so mixed lengths cost no numpy steps
    while n - pos >= HEADER_SIZE:
        framed = unpack(data, pos)[0] + OVERHEAD
        end = pos + framed
        if end > n:
            break
        if framed != last:
            last, streak = framed, 0
        else:
            streak += 1
            if streak >= wait and end + framed <= n:
                count = _equal_run(data, pos, framed, (n - pos) // framed)
                streak = 0
                if count < _PROBE:
                    wait *= 2
                if count > 1:
                    if heads:
                        pieces.append(np.array(heads, np.int64))
                        heads = []
                    pieces.append(np.arange(pos, pos + count * framed, framed, dtype=np.int64))
                    pos += count * framed
                    continue
        heads.append(pos)
        pos = end
    if heads or not pieces:
        pieces.append(np.array(heads, np.int64))
    return (pieces[0] if len(pieces) == 1 else np.concatenate(pieces)), pos


def _slices(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> list:
    return list(map(data.__getitem__, map(slice, starts.tolist(), (starts + lengths).tolist())))


def _lengths(data: bytes, heads: np.ndarray) -> np.ndarray:
    if not len(heads):
        return np.zeros(0, np.int64)
    arr = np.frombuffer(data, np.uint8)
    return np.ascontiguousarray(arr[heads[:, None] + _ARANGE8]).view("<u8").ravel().astype(np.int64)


def _u32s(arr: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr[at[:, None] + _ARANGE8[:4]]).view("<u4").ravel()


def _verify(data: bytes, heads: np.ndarray, lengths: np.ndarray, base: int, record: int,
            name: str, report=None, payloads: bool = False):
    """Check the length and payload CRCs of the records at ``heads``.

    Returns which records to keep, the index of the record that ends the
    scan (a bad length; without ``report``, any bad record) or None, without
    ``report`` the error to raise once the records before it are out, and
    with ``payloads`` the payloads of the records checked (else None).
    """
    keep = np.ones(len(heads), bool)
    if not len(heads):
        return keep, None, None, [] if payloads else None
    arr = np.frombuffer(data, np.uint8)
    header_crcs = mask_array(crc32c_rows(arr[heads[:, None] + _ARANGE8]))
    bad_header = np.flatnonzero(header_crcs != _u32s(arr, heads + 8))
    stop = int(bad_header[0]) if len(bad_header) else len(heads)
    checked = heads[:stop]  # past a bad length, offsets are meaningless
    starts = checked + HEADER_SIZE
    if payloads:  # slice once: the CRC is taken of the very bytes handed out
        pieces = _slices(data, starts, lengths[:stop])
        crcs = np.fromiter(map(crc32c, pieces), np.uint32, len(pieces))
    else:
        pieces = None
        view = memoryview(data)
        crcs = np.fromiter(map(crc32c, map(view.__getitem__, map(slice, starts.tolist(),
                                                                 (starts + lengths[:stop]).tolist()))),
                           np.uint32, stop)
    bad_payload = np.flatnonzero(mask_array(crcs) != _u32s(arr, starts + lengths[:stop]))
    errors = [CorruptRecordError(name, base + int(heads[i]), record + int(i),
                                 "payload CRC mismatch (data corrupted)") for i in bad_payload]
    if stop < len(heads):
        errors.append(CorruptRecordError(name, base + int(heads[stop]), record + stop,
                                         "length CRC mismatch (header corrupted)"))
    if report is None and errors:
        first = errors[0]
        keep[first.record - record:] = False
        return keep, first.record - record, first, pieces
    for error in errors:
        report(error)
    keep[bad_payload] = False
    keep[stop:] = False
    return keep, (stop if stop < len(heads) else None), None, pieces


def _equal_run(data: bytes, pos: int, framed: int, count: int) -> int:
    """How many records from ``pos`` on have the length of the one at ``pos``
    (their length CRCs are checked later, with everyone's)."""
    lengths = np.ndarray((count,), "<u8", data, pos, (framed,))
    want = framed - OVERHEAD
    for probe in ((lengths[:_PROBE], lengths) if count > _PROBE else (lengths,)):
        same = probe == want
        if not same.all():
            return int(np.argmin(same))
    return count
