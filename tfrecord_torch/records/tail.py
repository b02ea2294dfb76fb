"""Following a record file while it grows: :class:`RecordTail`.

A writer in place (``RecordWriter(path, atomic=False)``, TensorFlow's writer,
a TensorBoard event writer) appends records and flushes now and then; a reader
that arrives mid-write may find a last record that is only partly written.
This reader hands out the complete records, stops at the end of what is
there (a partial record included) without losing its place, and carries on
from the same record when iterated again.

A path is followed by name, as ``tail -F`` follows a log: when a new file
takes the name (a writer renamed the old one away, or published a new one
over it), the old file is read to its end and the new one from its start.
A file truncated under the reader, or truncated and written again from its
start, raises: the records after the reader's place are not there.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from tfrecord_torch._args import check_flag
from tfrecord_torch._types import CompressionArg, PathLike
from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import WBITS, check_compression, detect_compression
from tfrecord_torch.records.crc import masked_crc32c

__all__ = ["RecordTail"]

_CHUNK = 1 << 20  # raw bytes read, and most bytes inflated, at a time
_HEADER = struct.Struct("<QI")
_HEADER_SIZE = 12
_OVERHEAD = 16
_DETECT = 12  # bytes "auto" needs before it decides (an uncompressed header)
_PROBE = 64  # bytes at each end of what was read, compared with the file before each read


class _FollowedFile:
    """The file a path names, read from its start: its handle, how much of it
    has been read, and the first and last bytes read, which show that the
    file was truncated or written again since."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = open(path, "rb", buffering=0)  # unbuffered: every read sees new data
        st = os.fstat(self.file.fileno())
        self.identity = (st.st_dev, st.st_ino)
        self.position = 0  # bytes read, all handed to the RecordTail
        self._first = b""
        self._last = b""

    def read(self, size: int) -> bytes:
        data = self.file.read(size) or b""
        if data:
            self.position += len(data)
            if len(self._first) < _PROBE:
                self._first = (self._first + data[:_PROBE])[:_PROBE]
            self._last = (self._last + data[-_PROBE:])[-_PROBE:]
        return data

    def changed(self) -> str | None:
        """Why the bytes read so far are no longer the file's bytes, or None.
        A writer only appends; a shorter file, or other bytes where the first
        or the last bytes read were, means the file was cut under the reader."""
        if not self.position:
            return None
        fd = self.file.fileno()
        size = os.fstat(fd).st_size
        if size < self.position:
            return f"the file was truncated: it is {size:,} bytes long, and {self.position:,} of its bytes had been read"
        if (fs.pread_all(fd, len(self._first), 0) != self._first  # a short read (FUSE, NFS) read on
                or fs.pread_all(fd, len(self._last), self.position - len(self._last)) != self._last):
            return (f"the file was truncated and written again: its first {self.position:,} bytes, read "
                    "before, hold other bytes now")
        return None

    def replaced(self) -> bool:
        """Whether the path names another file than the one open."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:  # renamed away, and the new file not created yet
            return False
        return (st.st_dev, st.st_ino) != self.identity

    def close(self) -> None:
        self.file.close()


class RecordTail(Iterator[bytes]):
    """Iterate over the complete records of a file that may still be growing.

    Iterating yields each complete record's payload once and stops
    (StopIteration) at the end of what has been written, or before a last
    record that is only partly there. The reader keeps its place: iterate
    again after the writer has written (and flushed) more, and it goes on
    with the next record, the completed one included. This is what
    TensorBoard asks of TensorFlow's ``tf_record_iterator``, except that a
    partial last record stops the iteration instead of raising
    DataLossError: mid-write is the normal state of a followed file.
    :attr:`pending` says how much of a partial record is there, and
    :meth:`raise_if_truncated` turns it into an error once the writer is known
    to be done.

    A complete record that is corrupt (a bad length or payload CRC, invalid
    compressed data) raises CorruptRecordError, and raises again if
    iterated again: it will not heal by waiting.

    A path is followed by name. When another file takes the name (a
    log-style writer renamed the file away and started a new one, or a
    writer published a new file over it by a rename), the tail reads the old
    file to its end, then the new one from its start; :attr:`offset` and
    :attr:`records` start again at 0 and :attr:`replacements` counts the
    switch. The old file must be finished before the new one appears: if it
    ends inside a record then, that raises CorruptRecordError (a truncated
    record), again on every try. A file that comes and goes between two
    iterations is not seen.

    A file truncated under the tail (shorter than what was read of it), or
    truncated and written again from its start (as a writer that opens the
    same path again does: other bytes where the first or last bytes read
    were), raises CorruptRecordError naming the file, the next record's
    offset and number, and the sizes, on every try: the records after the
    tail's place are not there. Open a new RecordTail to read the file from
    its start. A file object is read as it is: replacement and truncation are
    detected through a path only.

    Args:
        source: a local path, or a binary file object (read from its current
            position; not closed here).
        compression: None, "gzip", "zlib", or "auto" to detect it from the
            first 12 bytes once they are there, and the name.
        verify: check the CRC32C of every length and payload.

    Example:
        >>> tail = RecordTail("events.tfrecord")   # doctest: +SKIP
        >>> for payload in tail:                   # the records written so far
        ...     handle(payload)
        >>> # later, after the writer flushed more: the loop goes on where it stopped
    """

    def __init__(self, source: PathLike | BinaryIO, *, compression: CompressionArg = "auto",
                 verify: bool = True) -> None:
        self._asked: str | None = check_compression(compression, allow_auto=True)
        self._compression = self._asked
        self.verify = check_flag("verify", verify)
        self._raw: BinaryIO
        self._followed: _FollowedFile | None = None
        if isinstance(source, (str, os.PathLike)):
            self.name = os.fspath(source)
            if fs.is_url(self.name):
                raise ValueError(f"source must be a local path or a file object, got the URL {self.name!r}: "
                                 "a growing remote object cannot be followed")
            self._followed = _FollowedFile(fs.local(self.name))
            self._raw = self._followed.file
            self._owned = True
        elif hasattr(source, "read"):
            self._raw = source
            self.name = str(getattr(source, "name", "<stream>"))
            self._owned = False
        else:
            raise TypeError(f"source must be a path or a binary file object, got {type(source).__name__}")
        self._head = b""  # raw bytes kept back while "auto" waits for enough to decide
        self._zip: zlib._Decompress | None = None
        self._carry = b""  # compressed bytes after a finished GZIP member (or ZLIB stream)
        self._buf = bytearray()  # decompressed bytes; those from ``_pos`` on are not handed out yet
        self._pos = 0  # cut off when more comes, not per record: a cut moves the whole buffer
        self._closed = False
        self.offset = 0
        """Byte offset of the next record in the file followed now (in the
        decompressed stream for a compressed file)."""
        self.records = 0
        """Records handed out from the file followed now."""
        self.replacements = 0
        """Times a new file under the path was followed after the old one's end."""
        if self._compression != "auto":
            self._start(self._compression)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"offset={self.offset:,}, pending={self.pending:,}"
        return f"RecordTail({self.name!r}, records={self.records:,}, {state})"

    @property
    def compression(self) -> str | None:
        """The file's compression; "auto" until its first 12 bytes are there."""
        return self._compression

    @property
    def pending(self) -> int:
        """Bytes read past :attr:`offset` and not handed out (decompressed
        bytes for a compressed file). After an iteration stops, these are the
        start of a partial last record: 0 when the data ends at a record boundary."""
        return len(self._buf) - self._pos + len(self._head)

    def __iter__(self) -> RecordTail:
        return self

    def __next__(self) -> bytes:
        if self._closed:
            raise ValueError(f"read from a closed RecordTail ({self.name}): open a new one")
        while True:
            payload = self._take()
            if payload is not None:
                return payload
            if not self._fill():
                raise StopIteration

    def raise_if_truncated(self) -> None:
        """Raise if the file ends inside a record, for when the writer is done
        (a writer killed mid-record leaves such a file). Reads what was
        written since the last iteration, but hands out nothing: the complete
        records it finds are still yielded by the next iteration.

        Raises:
            CorruptRecordError: naming the file, the partial record's offset
                and number, and how many of its bytes are there; or, as
                iterating does, a file truncated under the tail.
        """
        while self._fill():
            pass
        at, record, buf = self._pos, self.records, self._buf
        while len(buf) - at >= _HEADER_SIZE:
            length, length_crc = _HEADER.unpack_from(buf, at)
            if self.verify and masked_crc32c(bytes(buf[at:at + 8])) != length_crc:
                raise CorruptRecordError(self.name, self.offset + at - self._pos, record,
                                         "length CRC mismatch (header corrupted)")
            if len(buf) - at < length + _OVERHEAD:
                break
            at += length + _OVERHEAD
            record += 1
        partial = len(buf) - at + len(self._head)
        if partial:
            raise CorruptRecordError(self.name, self.offset + at - self._pos, record,
                                     f"truncated record: the data ends {partial} bytes into it")

    def close(self) -> None:
        """Close the file (a file object given is left open). Iterating afterwards is a ValueError."""
        self._closed = True
        if self._owned:
            self._raw.close()

    def __enter__(self) -> RecordTail:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_owned", False) and not getattr(self, "_closed", True):
            self._raw.close()

    def _take(self) -> bytes | None:
        """The next complete record out of the buffer, or None if it is not all there."""
        buf, at = self._buf, self._pos
        if len(buf) - at < _HEADER_SIZE:
            return None
        length, length_crc = _HEADER.unpack_from(buf, at)
        if self.verify and masked_crc32c(bytes(buf[at:at + 8])) != length_crc:
            raise CorruptRecordError(self.name, self.offset, self.records, "length CRC mismatch (header corrupted)")
        size = length + _OVERHEAD
        if len(buf) - at < size:
            return None
        payload = bytes(buf[at + _HEADER_SIZE:at + _HEADER_SIZE + length])
        if self.verify and masked_crc32c(payload) != int.from_bytes(buf[at + size - 4:at + size], "little"):
            raise CorruptRecordError(self.name, self.offset, self.records, "payload CRC mismatch (data corrupted)")
        self._pos += size
        self.offset += size
        self.records += 1
        return payload

    def _append(self, data: bytes) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def _fill(self) -> bool:
        """Add what the file holds beyond the buffer; False when nothing came."""
        while True:
            if self._zip is not None and self._zip.unconsumed_tail:
                data = self._zip.unconsumed_tail
            elif self._carry:
                data, self._carry = self._carry, b""
            else:
                data = self._read()
                if not data:
                    return False
                if self._compression == "auto":
                    self._head += data
                    if len(self._head) < _DETECT:
                        continue
                    self._start(detect_compression(self._head, self.name))
                    data, self._head = self._head, b""
            if self._zip is None:
                self._append(data)
                return True
            if self._inflate(data):
                return True

    def _read(self) -> bytes:
        """The file's next raw bytes; b"" when it has no more for now."""
        while True:
            followed = self._followed
            if followed is None:
                return self._raw.read(_CHUNK) or b""
            self._check(followed)
            data = followed.read(_CHUNK)
            if not data and followed.replaced():
                data = followed.read(_CHUNK)  # written before the new file took the name
                if not data:
                    if self._follow_new(followed):
                        continue
                    return b""
            if data:
                self._check(followed)  # cut between the check and the read: these are the new bytes
            return data

    def _check(self, followed: _FollowedFile) -> None:
        problem = followed.changed()
        if problem is not None:
            raise CorruptRecordError(self.name, self.offset, self.records,
                                     f"{problem}; the records from this one on cannot be read here: open a new "
                                     "RecordTail to read the file from its start")

    def _follow_new(self, old: _FollowedFile) -> bool:
        """Go on with the file that took the name, from its start, once ``old``
        is read to its end; False if that must wait (records of the old file
        still to hand out) or the new file went away again.

        Raises:
            CorruptRecordError: the old file ends inside a record.
        """
        if self.pending:
            if self._record_buffered():  # raise_if_truncated reads ahead: hand those out first
                return False
            raise CorruptRecordError(self.name, self.offset, self.records,
                                     f"truncated record: a new file took the name, and the old one ends "
                                     f"{self.pending} bytes into this record")
        try:
            new = _FollowedFile(old.path)
        except FileNotFoundError:
            return False
        old.close()
        self._followed, self._raw = new, new.file
        self._head, self._zip, self._carry = b"", None, b""
        self._buf, self._pos = bytearray(), 0
        self.offset = self.records = 0
        self.replacements += 1
        self._compression = self._asked  # "auto" decides again: the new file may be compressed otherwise
        if self._compression != "auto":
            self._start(self._compression)
        return True

    def _record_buffered(self) -> bool:
        """Whether a whole record waits in the buffer."""
        if len(self._buf) - self._pos < _HEADER_SIZE:
            return False
        length = _HEADER.unpack_from(self._buf, self._pos)[0]
        return len(self._buf) - self._pos >= length + _OVERHEAD

    def _inflate(self, data: bytes) -> bool:
        assert self._zip is not None and self._compression is not None
        try:
            piece = self._zip.decompress(data, _CHUNK)  # bounded: a small file may inflate to gigabytes
        except zlib.error as e:
            raise CorruptRecordError(self.name, self.offset, self.records,
                                     f"{self._compression} data is invalid: {e}") from e
        if self._zip.eof:  # what follows is another GZIP member (or ZLIB stream), now or later
            self._carry = self._zip.unused_data
            self._zip = zlib.decompressobj(WBITS[self._compression])
        self._append(piece)
        return bool(piece)

    def _start(self, compression: str | None) -> None:
        self._compression = compression
        if compression is not None:
            self._zip = zlib.decompressobj(WBITS[compression])
