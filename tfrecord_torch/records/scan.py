"""Finding and checking the records in a buffer (the reader's inner loop).

Walks the lengths first (a lean loop, or one numpy step over a run of equal
headers, as fixed-schema data has), then checks every CRC of the buffer at
once: length CRCs with a vectorized table CRC, payload CRCs with one C call
each. So a bad length is reported as such before anything acts on it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.records.crc import crc32c_rows, mask_array, masked_crc32c

__all__ = ["HEADER", "HEADER_SIZE", "OVERHEAD", "Scan", "scan"]

HEADER = struct.Struct("<QI")
HEADER_SIZE = 12
OVERHEAD = 16  # header + footer bytes around each payload


class Scan(NamedTuple):
    starts: np.ndarray  # payload starts of the good records
    numbers: np.ndarray  # their record numbers
    lengths: np.ndarray
    scanned: int  # records scanned, good or skipped
    end: int  # position after the last complete record
    need: int | None  # framed size of the incomplete record at ``end`` (None: header incomplete)
    stopped: bool  # a bad record ended the scan
    error: CorruptRecordError | None = None  # to raise once the good records before it are out


def scan(data: bytes, base: int, record: int, verify: bool, name: str, limit: int | None,
         report=None) -> Scan:
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
    found: list[int] = []
    unpack = _LENGTH.unpack_from
    while n - pos >= HEADER_SIZE:
        end = pos + unpack(data, pos)[0] + OVERHEAD
        if end > n:
            break
        found.append(pos)
        pos = end
    heads = np.concatenate([run, np.array(found, np.int64)]) if found else run
    lengths = _lengths(data, heads)
    keep, stop, error = (np.ones(len(heads), bool), None, None) if not verify else \
        _verify(data, heads, lengths, base, record, name, report)
    numbers = np.flatnonzero(keep).astype(np.int64) + record
    good = heads[keep]
    if stop is not None:
        return Scan(good + HEADER_SIZE, numbers, lengths[keep], stop, 0, None, True, error)
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
            return Scan(good + HEADER_SIZE, numbers, lengths[keep], len(heads), pos, None, True, error)
        need = length + OVERHEAD
    return Scan(good + HEADER_SIZE, numbers, lengths[keep], len(heads), pos, need, False)


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


