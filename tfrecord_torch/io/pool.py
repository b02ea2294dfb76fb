"""Positioned reads: one :class:`Reader` per file, and a thread-safe pool
that lends them out."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import http
from tfrecord_torch.io.files import filesystem, is_url, local, ranged

__all__ = ["Reader", "ReaderPool", "read_at"]


class Reader:
    """Positioned reads of one file: ``pread`` locally, one range request
    remotely. Reopens in a forked child."""

    def __init__(self, path: str, storage_options: dict | None = None) -> None:
        self.path, self._so = path, storage_options
        self._handle: Any = None  # a descriptor, or (filesystem, path) for a URL
        self._pid: int | None = None

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end of the file)."""
        if self._handle is None or self._pid != os.getpid():
            self._pid = os.getpid()
            self._handle = filesystem(self.path, self._so) if is_url(self.path) else \
                os.open(local(self.path), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        if not is_url(self.path):
            return os.pread(self._handle, size, offset)
        fs, p = self._handle
        what = f"read of bytes {offset}-{offset + size}"
        if http.is_http(self.path):
            return ranged(self.path, offset, offset + size,
                          lambda: http.read_range(fs, p, self.path, offset, offset + size))
        data = ranged(self.path, offset, offset + size, lambda: fs.cat_file(p, start=offset, end=offset + size))
        if len(data) > size:  # the server ignored the Range header and sent more
            raise RemoteError(self.path, f"{what}: the server answered {len(data)} bytes; it does "
                                         "not support range requests, so random access cannot work")
        return data

    def close(self) -> None:
        if self._handle is not None and self._pid == os.getpid() and not is_url(self.path):
            os.close(self._handle)
        self._handle = None

    def __getstate__(self):
        return {**self.__dict__, "_handle": None, "_pid": None}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class ReaderPool:
    """Lends open :class:`Reader` objects, one borrower at a time each.

    Thread-safe: a reader is never shared by two threads and never closed
    while lent (an evicted descriptor reused by another file would return the
    wrong bytes). At most ``limit`` idle readers stay open, least recently
    returned closed first, so reading thousands of shards never runs out of
    file descriptors. After a fork the child starts with an empty pool (the
    parent's descriptors and connections are not shared).

    Example:
        >>> pool = ReaderPool()
        >>> with pool.borrow("data.tfrecord") as reader:  # doctest: +SKIP
        ...     header = reader.read(0, 12)
    """

    def __init__(self, storage_options: dict | None = None, limit: int = 16) -> None:
        self.storage_options, self.limit = storage_options, limit
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, tuple[str, Reader]] = OrderedDict()
        self._pid = os.getpid()
        self._ticket = 0

    def _check_fork(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's readers (and lock state) are not ours
            self._reset()

    def _take(self, path: str) -> Reader:
        self._check_fork()
        with self._lock:
            for key, (p, reader) in reversed(self._idle.items()):
                if p == path:
                    del self._idle[key]
                    return reader
        return Reader(path, self.storage_options)

    def _give_back(self, path: str, reader: Reader) -> None:
        self._check_fork()
        evicted = []
        with self._lock:
            self._ticket += 1
            self._idle[self._ticket] = (path, reader)
            while len(self._idle) > self.limit:
                evicted.append(self._idle.popitem(last=False)[1][1])
        for r in evicted:
            r.close()

    @contextlib.contextmanager
    def borrow(self, path: str) -> Iterator[Reader]:
        """A reader of ``path`` for the ``with`` block, returned to the pool after."""
        reader = self._take(path)
        try:
            yield reader
        finally:
            self._give_back(path, reader)

    def read(self, path: str, offset: int, size: int) -> bytes:
        """``size`` bytes of ``path`` at ``offset`` (fewer at the end of the file)."""
        with self.borrow(path) as reader:
            return reader.read(offset, size)

    def close(self) -> None:
        """Close the idle readers (lent ones close when returned to a closed pool)."""
        self._check_fork()
        with self._lock:
            idle = [r for _, r in self._idle.values()]
            self._idle.clear()
        for r in idle:
            r.close()

    def __repr__(self) -> str:
        return f"ReaderPool(idle={len(self._idle)}, limit={self.limit})"

    def __getstate__(self) -> dict:
        return {"storage_options": self.storage_options, "limit": self.limit}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def read_at(path, offset: int, size: int, storage_options: dict | None = None) -> bytes:
    """One positioned read (opens and closes the file; use :class:`Reader` for many)."""
    reader = Reader(path, storage_options)
    try:
        return reader.read(offset, size)
    finally:
        reader.close()
