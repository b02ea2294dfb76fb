"""Fetching records for the datasets: by index (ranges or single records)
or by streaming whole shards, each payload with where it came from."""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple

import numpy as np

from .errors import CorruptRecordError, ExampleDecodeError, FeatureError
from .example import parse_example
from .features import decode
from .framing import iter_chunks, parse_frame
from .streams import open_stream, open_window

__all__ = ["SKIPPED", "Located", "decode_item", "decode_or_skip", "fetch", "locate", "parse_located", "stream_shard"]

_MAX_WINDOW = 64 << 20


class Located(NamedTuple):
    payload: bytes
    path: str
    offset: int
    record: int


def fetch(path: str, index: np.ndarray, records: np.ndarray, *, verify: bool = True,
          fds: dict | None = None, report=None) -> Iterator[Located]:
    """The records ``records`` of an indexed shard, in that order.

    An ascending run of consecutive records is read as one byte range and
    scanned; anything else is one positioned read per record. With
    ``report``, bad records are reported and skipped; when a bad length ends
    a range scan, reading resumes at the next record through the index.
    """
    if not len(records):
        return
    first, last = int(records[0]), int(records[-1])
    if len(records) > 1 and last - first + 1 == len(records) and (np.diff(records) == 1).all():
        start = int(index[first, 0])
        size = int(index[last, 0] + index[last, 1]) - start
        if size <= _MAX_WINDOW:
            stopped_at = []

            def note(error) -> None:
                stopped_at.append(error.record)
                report(error)

            done = first - 1
            with open_window(path, start, size) as stream:
                for chunk in iter_chunks(stream, verify=verify, offset=start, record=first,
                                         block_size=max(size, 1), report=note if report else None):
                    for i, payload in enumerate(chunk.payloads()):
                        done = int(chunk.numbers[i])
                        yield Located(payload, path, int(chunk.offsets[i]), done)
            if done < last and stopped_at:  # resume after the record that stopped the scan
                yield from fetch(path, index, records[records > max(stopped_at)], verify=verify,
                                 fds=fds, report=report)
            return
    fd = _fd(path, fds)
    for r in records.tolist():
        offset, size = int(index[r, 0]), int(index[r, 1])
        try:
            data = os.pread(fd, size, offset)
            payload = parse_frame(data, name=path, offset=offset, record=r, verify=verify)
        except CorruptRecordError as e:
            if report is None:
                raise
            report(e)
            continue
        yield Located(payload, path, offset, r)


def _fd(path: str, fds: dict | None) -> int:
    """A file descriptor for ``path``, kept in ``fds`` (one per process: the
    dict lives in the iterating worker, never shared across a fork)."""
    if fds is None:
        fds = {}
    key = (path, os.getpid())
    if key not in fds:
        fds[key] = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    return fds[key]


def stream_shard(path: str, *, compression="auto", verify: bool = True, report=None) -> Iterator[Located]:
    """Every record of a shard, streamed (compressed shards need this)."""
    with open_stream(path, compression) as stream:
        for chunk in iter_chunks(stream, verify=verify, report=report):
            for i, payload in enumerate(chunk.payloads()):
                yield Located(payload, path, int(chunk.offsets[i]), int(chunk.numbers[i]))


def locate(error: Exception, item: Located) -> Exception:
    """An error raised while decoding ``item``, with the item's location."""
    if isinstance(error, FeatureError):
        return error.at(item.path, item.offset, item.record)
    if isinstance(error, ExampleDecodeError):
        return CorruptRecordError(item.path, item.offset, item.record, str(error))
    return error


def parse_located(item: Located) -> dict:
    try:
        return parse_example(item.payload)
    except ExampleDecodeError as e:
        raise locate(e, item) from e


def decode_item(item: Located, spec: dict | None, transform) -> object:
    """Parse a record, decode it with ``spec`` (if any), apply ``transform``
    (if any); errors name the record's location."""
    record = parse_located(item)
    if spec is not None:
        try:
            record = decode(record, spec)
        except FeatureError as e:
            raise locate(e, item) from e
    return transform(record) if transform is not None else record


SKIPPED = object()  # what decode_or_skip returns for a record the policy skipped


def decode_or_skip(item: Located, spec: dict | None, transform, report) -> object:
    """decode_item, but with ``report`` a bad record is reported and SKIPPED."""
    if report is None:
        return decode_item(item, spec, transform)
    try:
        return decode_item(item, spec, transform)
    except (CorruptRecordError, FeatureError) as e:
        report(e)
        return SKIPPED

