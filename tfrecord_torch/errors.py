"""Exceptions raised by tfrecord_torch.

Every error caused by bad data is a :class:`TFRecordError`, so a caller can
catch one class. Errors about a record name the file, the byte offset of the
record's header and the record's number (0-based), and survive pickling, so a
DataLoader worker can pass them to the main process intact.
"""

from __future__ import annotations

import re

__all__ = [
    "CorruptRecordError",
    "ExampleDecodeError",
    "FeatureError",
    "IndexMismatchError",
    "MixedSizesError",
    "RemoteError",
    "StaleIndexError",
    "TFRecordError",
    "TensorDecodeError",
]


_LOCATED = re.compile(r"CorruptRecordError: (.+?): record (\d+) at byte offset (\d+): ([^\n]*)")
# What to do about a record whose CRC fails: the bytes are not those written (a partial or damaged copy).
# With the file's index the reader goes on at the next record; without one it cannot find the next header.
_DAMAGED = ("the file is damaged at this record (a partial copy, a disk or transfer error): copy it again "
            "from its source, or read past it with on_error=\"warn\" (or \"skip\")")
_ADVICE = {
    "length CRC mismatch": f"{_DAMAGED}; without an index of the file, its records after this one are lost",
    "payload CRC mismatch": _DAMAGED,
}


def _without_advice(reason: str) -> str:
    """``reason`` as raised, from a message's line that ends with its :func:`_advice`."""
    for advice in _ADVICE.values():
        if reason.endswith(f": {advice}"):
            return reason[: -len(advice) - 2]
    return reason


def _advice(reason: str | None) -> str:
    """What to do about ``reason``, as a suffix of the message ("" where nothing is to say)."""
    for start, advice in _ADVICE.items():
        if reason is not None and reason.startswith(start) and advice not in reason:
            return f": {advice}"
    return ""
_FEATURE = re.compile(r"FeatureError: (.+?): record (\d+) at byte offset (\d+): feature '([^']*)': ([^\n]*)")


class TFRecordError(Exception):
    """Base class of every data error raised by tfrecord_torch."""


class CorruptRecordError(TFRecordError):
    """A record is corrupted or truncated.

    Attributes:
        path: the file (or stream name) holding the record.
        offset: byte offset of the record's header; in a compressed file, the
            offset in the decompressed stream.
        record: 0-based number of the record in the file.
        reason: what is wrong with it.
    """

    def __init__(self, path: str, offset: int | None = None, record: int | None = None,
                 reason: str | None = None) -> None:
        if offset is None and record is None and reason is None:
            # One argument: a message, as DataLoader re-raises a worker's error
            # (the worker's traceback text). Recover the fields from it.
            message = str(path)
            found = _LOCATED.findall(message)
            path, record, offset, reason = found[-1] if found else ("<unknown>", -1, -1, message)
            if found:
                reason = f"{_without_advice(reason)} (raised in a DataLoader worker)\n{message}"
        self.path = str(path)
        self.offset = -1 if offset is None else int(offset)
        self.record = -1 if record is None else int(record)
        self.reason = reason
        super().__init__(f"{self.path}: record {self.record} at byte offset {self.offset}: {reason}{_advice(reason)}")

    def __reduce__(self):
        return (type(self), (self.path, self.offset, self.record, self.reason))


class IndexMismatchError(TFRecordError):
    """An index file is malformed or does not describe its record file.

    Attributes:
        index_path: the index file.
        path: the record file it was checked against (None if not known).
        reason: what does not match.
    """

    def __init__(self, index_path: str, path: str | None = None, reason: str | None = None) -> None:
        if reason is None and path is None:  # one argument: a worker's message
            index_path, reason = "<index>", str(index_path)
        self.index_path = str(index_path)
        self.path = None if path is None else str(path)
        self.reason = reason
        target = f" for {self.path}" if self.path is not None else ""
        super().__init__(f"index {self.index_path}{target}: {reason}")

    def __reduce__(self):
        return (type(self), (self.index_path, self.path, self.reason))


class StaleIndexError(TFRecordError):
    """A record read where an index put it is not the record the index
    describes, and the file itself is sound: the index is stale (the file
    changed since it was indexed) or belongs to another file. Never skipped
    under ``on_error``: every later record would be misplaced too.

    Attributes:
        path, offset, record: where the index put the record.
        detail: what was found there.
    """

    def __init__(self, path: str, offset: int, record: int, detail: str) -> None:
        self.path, self.offset, self.record, self.detail = str(path), int(offset), int(record), detail
        super().__init__(
            f"{self.path}: record {self.record} at byte offset {self.offset}: {detail}: the index does not "
            f"describe this file as it is now (stale, or made for another file); rebuild it with "
            f"`tfrecord-torch index {self.path}`")

    def __reduce__(self):
        return (type(self), (self.path, self.offset, self.record, self.detail))


class ExampleDecodeError(TFRecordError, ValueError):
    """A payload is not a valid serialized tf.train.Example / SequenceExample."""


class TensorDecodeError(TFRecordError, ValueError):
    """A payload is not a valid serialized TensorProto (``tf.io.serialize_tensor``'s
    output), holds a dtype or shape with no tensor here, or is not the dtype
    asked for. Read through a dataset, it reaches the caller as a
    :class:`FeatureError` naming the file, record and key."""


class FeatureError(TFRecordError):
    """A feature is missing, of the wrong kind or shape, or fails to decode.

    Attributes:
        key: the feature's key in the record.
        reason: what is wrong.
        path, offset, record: where the record is (None when not known).
    """

    def __init__(self, key: str | None, reason: str | None = None, path: str | None = None,
                 offset: int | None = None, record: int | None = None) -> None:
        if reason is None:  # one argument: a worker's message (see CorruptRecordError)
            message = str(key)
            found = _FEATURE.findall(message)
            if found:
                path, record, offset, key, reason = found[-1]
                record, offset = int(record), int(offset)
                reason = f"{reason} (raised in a DataLoader worker)\n{message}"
            else:
                reason = message
        self.key, self.reason = key, reason
        self.path, self.offset, self.record = path, offset, record
        location = "" if path is None else f"{path}: record {record} at byte offset {offset}: "
        super().__init__(f"{location}feature {key!r}: {reason}")

    def __reduce__(self):
        return (type(self), (self.key, self.reason, self.path, self.offset, self.record))

    def at(self, path: str, offset: int | None, record: int | None) -> FeatureError:
        """The same error, located in a file."""
        return FeatureError(self.key, self.reason, path, offset, record)


class MixedSizesError(TFRecordError, ValueError):
    """In batch mode, the images (or masks) of one batch differ in size and
    nothing gives the batch one size, so they cannot be one tensor. The
    message names two records of different sizes (file, byte offset, record)
    and the options that fix the batch's size."""


class RemoteError(TFRecordError):
    """A remote read or write failed after its retries."""

    def __init__(self, url: str, detail: str | None = None) -> None:
        if detail is None:  # one argument: a worker's message, as DataLoader re-raises it
            found = re.findall(r"RemoteError: (\S+): ([^\n]*)", url)
            url, detail = found[-1] if found else ("<unknown>", url)
        self.url = url
        super().__init__(f"{url}: {detail}")

    def __reduce__(self):
        return (type(self), (self.url, str(self)[len(self.url) + 2:]))
