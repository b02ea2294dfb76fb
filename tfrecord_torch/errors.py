"""Exceptions raised by tfrecord_torch.

Every error caused by bad data is a :class:`TFRecordError`, so a caller can
catch one class. Errors about a record name the file, the byte offset of the
record's header and the record's number (0-based), and survive pickling, so a
DataLoader worker can pass them to the main process intact.
"""

from __future__ import annotations

__all__ = [
    "CorruptRecordError",
    "ExampleDecodeError",
    "IndexMismatchError",
    "TFRecordError",
]


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

    def __init__(self, path: str, offset: int, record: int, reason: str) -> None:
        self.path = str(path)
        self.offset = int(offset)
        self.record = int(record)
        self.reason = reason
        super().__init__(f"{self.path}: record {self.record} at byte offset {self.offset}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.offset, self.record, self.reason))


class IndexMismatchError(TFRecordError):
    """An index file is malformed or does not describe its record file.

    Attributes:
        index_path: the index file.
        path: the record file it was checked against (None if not known).
        reason: what does not match.
    """

    def __init__(self, index_path: str, path: str | None, reason: str) -> None:
        self.index_path = str(index_path)
        self.path = None if path is None else str(path)
        self.reason = reason
        target = f" for {self.path}" if self.path is not None else ""
        super().__init__(f"index {self.index_path}{target}: {reason}")

    def __reduce__(self):
        return (type(self), (self.index_path, self.path, self.reason))


class ExampleDecodeError(TFRecordError, ValueError):
    """A payload is not a valid serialized tf.train.Example / SequenceExample."""
