"""The text of index files, read and written in bounded chunks.

The format is DALI's and the ``tfrecord`` package's: ``"{offset} {size}\\n"``
per record. Dialects read: any whitespace between and around the numbers
(spaces, tabs, CRLF line ends, blank lines, a missing final newline), as
DALI's own reader takes the file as a stream of whitespace-separated
integers read in pairs. Anything else (a sign, a letter, an odd count of
numbers) is an error naming the line. Written: one ``"offset size\\n"`` line
per record, LF line ends.

Both directions work a few MiB at a time into int64 arrays, so an index of
tens of millions of records costs its array (16 bytes a record) and little
more: no per-record Python objects.
"""

from __future__ import annotations

import os
import re

import numpy as np

from tfrecord_torch.errors import IndexMismatchError
from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs

__all__ = ["parse_index_text", "read_index_file", "write_index_file"]

_CHUNK = 8 << 20  # bytes of index text parsed at a time
_ROWS = 1 << 18  # records formatted at a time
_VALID = re.compile(rb"[0-9 \t\r\n\v\f]*")
_TOO_LONG = re.compile(rb"[0-9]{19,}")  # past int64
_WHITESPACE = b" \t\r\n\v\f"


def parse_index_text(text: bytes, index_path: str = "<index>") -> np.ndarray:
    """The int64 array [N, 2] an index text describes (whole text in memory)."""
    out = _Growing()
    _parse_into(text, out, index_path, 0)
    if out.n % 2:
        raise _odd_line(index_path, text.split(b"\n"))
    return out.finish()


class _Growing:
    """An int64 vector grown by ``realloc`` (large blocks grow in place: no double peak)."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.values = np.empty(max(capacity, 16), np.int64)
        self.n = 0

    def add(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.values):
            self.values.resize(max(need, 2 * len(self.values)), refcheck=False)
        self.values[self.n:need] = values
        self.n = need

    def finish(self) -> np.ndarray:
        self.values.resize(self.n, refcheck=False)
        return self.values.reshape(-1, 2)


def _parse_into(chunk: bytes, out: _Growing, index_path: str, lines_before: int) -> None:
    """Parse whitespace-separated integers (a chunk cut at whitespace) into ``out``."""
    valid = _VALID.match(chunk)
    end = len(chunk) if valid is None else valid.end()
    if end != len(chunk):
        why = "a negative number" if chunk[end:end + 1] == b"-" else "not integers 'offset size'"
        raise _bad_line(index_path, chunk, end, lines_before, why)
    long = _TOO_LONG.search(chunk)
    if long is not None:
        raise _bad_line(index_path, chunk, long.start(), lines_before, "integers past int64")
    if not chunk.strip(_WHITESPACE):
        return
    # " " matches any whitespace; the check above leaves nothing for NumPy to warn of (its
    # DeprecationWarning for unmatched text), so no catch_warnings, which is not thread-safe
    out.add(np.fromstring(chunk, dtype=np.int64, sep=" "))


def _bad_line(index_path: str, text: bytes, at: int, lines_before: int = 0,
              why: str = "not 'offset size'") -> IndexMismatchError:
    """An error naming the line of ``text`` that holds byte ``at``."""
    start = text.rfind(b"\n", 0, at) + 1
    stop = text.find(b"\n", at)
    line = text[start:stop if stop >= 0 else len(text)]
    line_number = lines_before + text.count(b"\n", 0, start) + 1
    return IndexMismatchError(index_path, None, f"line {line_number} is {line[:60]!r}: {why}")


def _odd_line(index_path: str, lines) -> IndexMismatchError:
    """The error for an odd count of numbers: the first line not holding pairs."""
    for line_number, line in enumerate(lines, start=1):
        if len(line.split()) % 2:
            return IndexMismatchError(index_path, None,
                                      f"line {line_number} is {line[:60]!r}, not 'offset size'")
    return IndexMismatchError(index_path, None, "an odd count of numbers: not pairs of 'offset size'")


def read_index_file(index_path: str, storage_options: dict | None = None) -> np.ndarray:
    """Load an index file a chunk at a time (local or URL) into an int64 array [N, 2]."""
    remote = fs.is_url(index_path)
    # A local index: one cheap pass counting lines sizes the array (about) exactly.
    out = _Growing(1 << 16 if remote else 2 * _count_lines(index_path) + 2)
    raw, _ = fs.open_read(index_path, storage_options)
    with raw:
        carry, lines = b"", 0
        while True:
            data = _read_full(raw, _CHUNK)
            if not data:
                break
            data = carry + data
            cut = max(data.rfind(c) for c in (b"\n", b" ", b"\t", b"\r"))
            body, carry = (data[:cut + 1], data[cut + 1:]) if cut >= 0 else (b"", data)
            _parse_into(body, out, index_path, lines)
            lines += body.count(b"\n")
        _parse_into(carry, out, index_path, lines)
    if out.n % 2:
        raw, _ = fs.open_read(index_path, storage_options)
        with raw:
            raise _odd_line(index_path, _lines(raw))
    return out.finish()


def _lines(raw):
    carry = b""
    while True:
        data = _read_full(raw, _CHUNK)
        if not data:
            yield carry
            return
        *done, carry = (carry + data).split(b"\n")
        yield from done


def _read_full(raw, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        piece = raw.read(n - got)
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)


def _count_lines(path: str) -> int:
    count = 0
    with open(fs.local(path), "rb", buffering=0) as f:
        while True:
            data = f.read(_CHUNK)
            if not data:
                return count
            count += data.count(b"\n")


def write_index_file(index: np.ndarray, index_path: str, *, storage_options: dict | None = None) -> None:
    """Write an index array [N, 2] as an index file, atomically, formatting
    a bounded number of records at a time."""
    index_path = os.fspath(index_path)
    if fs.is_url(index_path):  # uploaded whole from a local temporary file
        import tempfile

        fd, temp = tempfile.mkstemp(suffix=".index")
        try:
            with os.fdopen(fd, "wb") as f:
                _write_rows(index, f)
            atomic.upload(temp, index_path, storage_options)
        finally:
            os.unlink(temp)
        return
    with atomic.writing(index_path) as f:
        _write_rows(index, f)


def _write_rows(index: np.ndarray, f) -> None:
    for start in range(0, len(index), _ROWS):
        rows = index[start:start + _ROWS].tolist()
        f.write("".join([f"{o} {s}\n" for o, s in rows]).encode("ascii"))
