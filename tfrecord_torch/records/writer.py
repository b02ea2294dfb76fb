"""Writing TFRecord files: :class:`RecordWriter` and the framing of one record."""

from __future__ import annotations

import array
import logging
import os
import struct
import warnings
import zlib
from typing import BinaryIO, cast

import numpy as np

from tfrecord_torch._types import Bytes, CompressionArg, PathLike
from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import WBITS, check_compression
from tfrecord_torch.records.crc import masked_crc32c

__all__ = ["RecordWriter", "frame"]

log = logging.getLogger(__name__)


def frame(payload) -> bytes:
    """The framed bytes of one record."""
    length = struct.pack("<Q", len(payload))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), payload,
                     struct.pack("<I", masked_crc32c(payload))))


class RecordWriter:
    """Write records to a TFRecord file.

    The file is written under a temporary name in the same folder and renamed
    to ``path`` only when the writer closes without error, so an interrupted
    write never leaves a file that looks complete (a failed one leaves nothing;
    a writer dropped unclosed warns ResourceWarning and leaves nothing; a killed
    one's hidden ``.partial`` file is removed by the next writer of the same path).
    For a URL (``s3://...``) the file is written to a local temporary file and
    uploaded when closed: no object appears under the name before that.

    Args:
        path: the file to create (replaced if it exists), or a binary file
            object to write to (then no renaming happens).
        compression: None, "gzip" or "zlib" (as TensorFlow's
            TFRecordOptions compression_type).
        index: also write the file's index (uncompressed files only): True for
            ``<folder>/index/<file>.index`` (see :func:`writer_index_path`), or
            the index file's path. It is in place before the data file appears.

    Example:
        >>> with RecordWriter("data.tfrecord") as w:
        ...     w.write(b"payload")
    """

    def __init__(self, path: PathLike | BinaryIO, *, compression: CompressionArg = None,
                 index: bool | PathLike = False, storage_options: dict | None = None) -> None:
        self.compression = check_compression(compression, allow_auto=False)
        if index and (self.compression is not None or hasattr(path, "write")):
            raise ValueError("index=True needs an uncompressed file written by path")
        self.records = 0
        self.offset = 0  # bytes of framed records written (before compression)
        self._index: array.array | None = array.array("q") if index else None
        self._index_path = None if isinstance(index, bool) else os.fspath(index)
        self._final: str | None = None
        self._storage_options = storage_options
        if not isinstance(path, (str, os.PathLike)):  # a binary file object
            if not hasattr(path, "write"):
                raise TypeError(f"path must be a path, a URL or a binary file object, got {type(path).__name__}")
            self._file: BinaryIO = path
            self._owned = False
        else:
            self._final = os.fspath(path)
            if fs.is_url(self._final):  # written locally, uploaded whole on close
                folder, base = None, os.path.basename(self._final)
            else:
                self._final = fs.local(self._final)
                folder, base = os.path.split(os.path.abspath(self._final))
            if folder is not None:  # a killed earlier run's file of the same output
                for orphan in atomic.remove_orphans(folder, base):
                    log.info("removed %s, left by a writer that was killed", orphan)
            fd, self._temp = atomic.create_temp(folder, base, lock=True)
            self._file = os.fdopen(fd, "wb")
            self._owned = True
        self._zip = None
        if self.compression is not None:
            self._zip = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, WBITS[self.compression])
        self._closed = False

    def __repr__(self) -> str:
        target = self._final if self._final is not None else getattr(self._file, "name", "<file object>")
        state = "closed" if self._closed else "open"
        return (f"RecordWriter({target!r}, compression={self.compression!r}, records={self.records}, "
                f"{state})")

    @property
    def path(self) -> str | None:
        """The final path (None when writing to a file object)."""
        return self._final

    def write(self, payload: Bytes) -> int:
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
                    from tfrecord_torch.records.index import write_index, writer_index_path

                    sizes = np.frombuffer(self._index, np.int64)
                    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(sizes) else sizes
                    index_path = self._index_path or writer_index_path(self._final)
                    if not fs.is_url(index_path):
                        os.makedirs(os.path.dirname(index_path), exist_ok=True)
                    write_index(np.stack([offsets, sizes], axis=1).reshape(-1, 2),
                                index_path, storage_options=self._storage_options)
                final = cast(str, self._final)  # a path was given (self._owned)
                if fs.is_url(final):
                    atomic.upload(self._temp, final, self._storage_options)
                    os.unlink(self._temp)
                else:
                    os.replace(self._temp, final)  # keeps the mtime the stamp records
                    if self._index is not None:
                        from tfrecord_torch.records.stamp import write_stamp

                        write_stamp(final, index_path, len(self._index))
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

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        # Dropped without close(): never promote a possibly partial file.
        if getattr(self, "_owned", False) and not getattr(self, "_closed", True):
            warnings.warn(f"RecordWriter({self._final!r}) was dropped without close(): "
                          "its partial file is removed, nothing is published", ResourceWarning, stacklevel=2)
            self.abort()
