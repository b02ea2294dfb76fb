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

from tfrecord_torch._args import check_flag
from tfrecord_torch._types import Bytes, CompressionArg, PathLike
from tfrecord_torch.io import atomic as atomic_files
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import (
    CompressionOptions,
    check_compression,
    check_compression_options,
)
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

    By default (``atomic=True``) the file is written under a temporary name in
    the same folder and renamed to ``path`` only when the writer closes without
    error, so an interrupted write never leaves a file that looks complete (a
    failed one leaves nothing; a writer dropped unclosed warns ResourceWarning
    and leaves nothing; a killed one's hidden ``.partial`` file is removed by
    the next writer of the same path). For a URL (``s3://...``) the file is
    written to a local temporary file and uploaded when closed: no object
    appears under the name before that.

    With ``atomic=False`` the records go straight to ``path`` (created, or
    truncated if it exists), as TensorFlow's writer does, so that a reader can
    follow the file while it grows (:class:`~tfrecord_torch.records.RecordTail`):
    what :meth:`flush` returns from is readable, and :meth:`close` completes
    the file. A failed or dropped writer keeps the records written so far
    (the file is then complete up to them); a killed one may leave a
    truncated last record, which a reader reports as such.

    Args:
        path: the file to create (replaced if it exists), or a binary file
            object to write to (then no renaming happens and ``atomic`` does
            not apply).
        compression: None, "gzip" or "zlib" (as TensorFlow's
            TFRecordOptions compression_type).
        compression_options: how to deflate a compressed file (level, window,
            memory, strategy); the default is TensorFlow's, byte for byte.
        atomic: publish the file whole on close (True), or write it in place
            (False, a local path only).
        index: also write the file's index (uncompressed files only): True for
            ``<folder>/index/<file>.index`` (see :func:`writer_index_path`), or
            the index file's path. With ``atomic`` it is in place before the
            data file appears; without, it is written when the writer closes.
        storage_options: fsspec options for URLs.

    Example:
        >>> with RecordWriter("data.tfrecord") as w:
        ...     w.write(b"payload")
    """

    def __init__(self, path: PathLike | BinaryIO, *, compression: CompressionArg = None,
                 compression_options: CompressionOptions | None = None, atomic: bool = True,
                 index: bool | PathLike = False, storage_options: dict | None = None) -> None:
        self.compression = check_compression(compression, allow_auto=False)
        self.atomic = check_flag("atomic", atomic)
        check_compression_options(self.compression, compression_options)
        if index and (self.compression is not None or hasattr(path, "write")):
            raise ValueError("index=True needs an uncompressed file written by path")
        self.records = 0
        self.offset = 0  # bytes of framed records written (before compression)
        self._index: array.array | None = array.array("q") if index else None
        self._index_path = None if isinstance(index, bool) else os.fspath(index)
        self._final: str | None = None
        self._temp: str | None = None
        self._storage_options = storage_options
        if not isinstance(path, (str, os.PathLike)):  # a binary file object
            if not hasattr(path, "write"):
                raise TypeError(f"path must be a path, a URL or a binary file object, got {type(path).__name__}")
            self._file: BinaryIO = path
            self._owned = False
        elif not atomic:
            self._final = os.fspath(path)
            if fs.is_url(self._final):
                raise ValueError(f"atomic=False writes in place, which needs a local path, got {self._final!r} "
                                 "(a URL is uploaded whole when the writer closes: use atomic=True)")
            self._final = fs.local(self._final)
            self._file = open(self._final, "wb")  # owned: closed by close() or abort()
            self._owned = True
        else:
            self._final = os.fspath(path)
            if fs.is_url(self._final):  # written locally, uploaded whole on close
                folder, base = None, os.path.basename(self._final)
            else:
                self._final = fs.local(self._final)
                folder, base = os.path.split(os.path.abspath(self._final))
            if folder is not None:  # a killed earlier run's file of the same output
                for orphan in atomic_files.remove_orphans(folder, base):
                    log.info("removed %s, left by a writer that was killed", orphan)
            fd, self._temp = atomic_files.create_temp(folder, base, lock=True)
            self._file = os.fdopen(fd, "wb")
            self._owned = True
        self._zip = None
        if self.compression is not None:
            self._zip = (compression_options or CompressionOptions()).compressor(self.compression)
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        mode = "" if self.atomic else ", atomic=False"
        return (f"RecordWriter({self._target()!r}, compression={self.compression!r}{mode}, "
                f"records={self.records}, {state})")

    @property
    def path(self) -> str | None:
        """The final path (None when writing to a file object)."""
        return self._final

    def write(self, payload: Bytes) -> int:
        """Append one record; returns the stream offset of its header.

        Raises:
            ValueError: the writer is closed.
        """
        if self._closed:
            raise ValueError(f"write to a closed RecordWriter ({self._target()}): open a new one")
        data = frame(memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload)
        at = self.offset
        self._file.write(self._zip.compress(data) if self._zip else data)
        self.offset += len(data)
        self.records += 1
        if self._index is not None:
            self._index.append(len(data))
        return at

    def flush(self) -> None:
        """Hand the records written so far to the operating system, as
        TensorFlow's ``flush`` does (it does not fsync; :meth:`close` does).

        In place (``atomic=False``) a reader of the file then sees every record
        written before the call, whole, compressed files included (the
        compressor is flushed as TensorFlow flushes it, ``Z_PARTIAL_FLUSH``, so
        the bytes are TensorFlow's). With ``atomic=True`` the records reach the
        hidden temporary file: nothing appears under ``path`` before
        :meth:`close`.

        Raises:
            ValueError: the writer is closed (TensorFlow: FailedPreconditionError).
        """
        if self._closed:
            raise ValueError(f"flush of a closed RecordWriter ({self._target()}): its file is complete")
        if self._zip is not None:
            self._file.write(self._zip.flush(zlib.Z_PARTIAL_FLUSH))
        self._file.flush()

    def close(self) -> None:
        """Finish the file: flush, sync and (``atomic``) move it to its final name.
        Closing again does nothing."""
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
                index_path = self._write_index()
                final = cast(str, self._final)  # a path was given (self._owned)
                if self._temp is None:  # written in place
                    pass
                elif fs.is_url(final):
                    atomic_files.upload(self._temp, final, self._storage_options)
                    os.unlink(self._temp)
                else:
                    os.replace(self._temp, final)  # keeps the mtime the stamp records
                if index_path is not None and not fs.is_url(final):
                    from tfrecord_torch.records.stamp import write_stamp

                    write_stamp(final, index_path, len(cast(array.array, self._index)))
        except BaseException:
            self.abort()
            raise

    def _write_index(self) -> str | None:
        if self._index is None:
            return None
        from tfrecord_torch.records.index import write_index, writer_index_path

        sizes = np.frombuffer(self._index, np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(sizes) else sizes
        index_path = self._index_path or writer_index_path(cast(str, self._final))
        if not fs.is_url(index_path):
            os.makedirs(os.path.dirname(index_path), exist_ok=True)
        write_index(np.stack([offsets, sizes], axis=1).reshape(-1, 2), index_path,
                    storage_options=self._storage_options)
        return index_path

    def abort(self) -> None:
        """Stop writing. With ``atomic`` the partial file is removed; in place
        the file keeps the records written so far, its compressed stream
        completed (a file object is left as is)."""
        was_closed, self._closed = self._closed, True
        if not self._owned:
            return
        if self._temp is None:
            if not was_closed and self._zip is not None:
                try:  # end the stream, so the records written read back without a truncation error
                    self._file.write(self._zip.flush())
                except (OSError, ValueError, zlib.error):
                    pass
            try:
                self._file.close()
            except OSError:
                pass  # the write that failed is the error reported; the data written stays
            return
        self._file.close()
        try:
            os.unlink(self._temp)
        except FileNotFoundError:
            pass

    def _target(self) -> str:
        return self._final if self._final is not None else getattr(self._file, "name", "<file object>")

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
            kept = ("its records so far are kept" if self._temp is None
                    else "its partial file is removed, nothing is published")
            warnings.warn(f"RecordWriter({self._final!r}) was dropped without close(): {kept}", ResourceWarning,
                          stacklevel=2)
            self.abort()
