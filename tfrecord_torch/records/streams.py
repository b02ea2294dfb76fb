"""Byte sources for the record reader: local files, file objects, and
GZIP/ZLIB decompression with bounded memory.

How a compression is named, detected and suffixed lives in
:mod:`tfrecord_torch.records.compression`.
"""

from __future__ import annotations

import io
import os
import zlib
from typing import BinaryIO

from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import WBITS, check_compression, detect_compression

MAX_INFLATE = 1032  # deflate's largest expansion ratio (258-byte matches of 2 bits each)


class Stream:
    """A readable byte stream with a display name and, if known, a size.

    ``read(n)`` returns exactly ``n`` bytes unless the stream ends first.
    ``size`` is the number of bytes left to read at creation (None when
    unknown, as for a decompressed stream). ``compression`` says whether the
    bytes are decompressed, so errors can say which offsets they mean.
    """

    def __init__(self, raw: BinaryIO | _Inflater, name: str, size: int | None, *, prefix: bytes = b"",
                 compression: str | None = None, owned: bool = False) -> None:
        self._raw = raw
        self._prefix = prefix
        self._error: Exception | None = None
        self.name = name
        self.size = size
        self.compression = compression
        self._owned = owned
        self.bound: int | None = None  # most bytes the stream can hold, when its size is unknown

    def read(self, n: int) -> bytes:
        if n <= 0:
            return b""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        parts = []
        if self._prefix:
            parts.append(self._prefix[:n])
            self._prefix = self._prefix[n:]
            n -= len(parts[0])
        while n > 0:
            try:
                data = self._raw.read(n)
            except Exception as e:  # hand over what came before the fault first
                if not parts:
                    raise
                self._error = e
                break
            if not data:
                break
            parts.append(data)
            n -= len(data)
        if len(parts) == 1:
            return bytes(parts[0])
        return b"".join(parts)

    def close(self) -> None:
        if self._owned:
            self._raw.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Inflater(io.RawIOBase):
    """Decompresses a GZIP (possibly multi-member) or ZLIB stream on demand.

    Output is produced only as it is asked for (``max_length``), so a small
    file that inflates to gigabytes never sits in memory whole.
    """

    def __init__(self, raw: Stream, compression: str, chunk_size: int = 1 << 20) -> None:
        self._raw = raw
        self._wbits = WBITS[compression]
        self._chunk_size = chunk_size
        self._decomp = zlib.decompressobj(self._wbits)
        self._eof = False
        self._error: Exception | None = None

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        """Up to n decompressed bytes. A corrupt or truncated stream first
        returns what decompressed before the fault; the next read raises, so
        the reader can name the record the fault cuts."""
        if n is None or n < 0:
            raise ValueError("unbounded reads of a decompressed stream are not supported")
        if self._error is not None:
            raise self._error
        out: list[bytes] = []
        try:
            self._inflate(n, out)
        except (zlib.error, EOFError) as e:
            if not out:
                raise
            self._error = e
        return b"".join(out)

    def _inflate(self, n: int, out: list) -> None:
        while n > 0 and not self._eof:
            if self._decomp.eof:
                data = self._decomp.unused_data or self._raw.read(self._chunk_size)
                if not data:
                    self._eof = True
                    break
                # Another GZIP member: concatenated .gz files are one stream.
                self._decomp = zlib.decompressobj(self._wbits)
            elif self._decomp.unconsumed_tail:
                data = self._decomp.unconsumed_tail
            else:
                data = self._raw.read(self._chunk_size)
                if not data:
                    raise EOFError("compressed stream ends before its end marker")
            piece = self._decomp.decompress(data, n)
            n -= len(piece)
            if piece:
                out.append(piece)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_stream(source, compression="auto", storage_options: dict | None = None, *,
                ahead: int = fs.READ_AHEAD) -> Stream:
    """Open a path, URL or binary file object as a :class:`Stream` of record bytes.

    Args:
        source: a path (str or os.PathLike), an fsspec URL, or a binary file object.
        compression: None, "gzip", "zlib" or "auto" (see the module docstring).
        storage_options: passed to fsspec for URLs (credentials, endpoint, ...).
        ahead: bytes each request of a URL fetches past those asked for
            (:attr:`~tfrecord_torch.io.budget.ReadBudget.stream`).
    """
    compression = check_compression(compression, allow_auto=True)
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        raw, size = fs.open_read(name, storage_options, ahead=ahead)
        owned = True
    elif hasattr(source, "read"):
        raw = source
        owned = False
        name = str(getattr(source, "name", "<stream>"))
        size = _remaining_size(source)
    else:
        raise TypeError(f"source must be a path or a binary file object, got {type(source).__name__}")
    try:
        head = b""
        if compression == "auto":
            head = Stream(raw, name, None).read(12)
            compression = detect_compression(head, name)
        plain = Stream(raw, name, size, prefix=head, owned=owned)
        if compression is None:
            return plain
        inflated = Stream(_Inflater(plain, compression), name, None, compression=compression, owned=True)
        if size is not None:  # deflate expands at most 1032:1, so no record can be longer than this
            inflated.bound = size * MAX_INFLATE + (1 << 16)
        return inflated
    except BaseException:
        if owned:
            raw.close()
        raise


def _remaining_size(f) -> int | None:
    try:
        if not f.seekable():
            return None
        here = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


def open_bytes(data: bytes, name: str) -> Stream:
    """A :class:`Stream` over bytes already in memory (a window of a file)."""
    return Stream(io.BytesIO(data), name, len(data), owned=True)
