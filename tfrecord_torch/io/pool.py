"""Positioned reads: one :class:`Reader` per file, and a thread-safe pool
that lends them out."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import http
from tfrecord_torch.io.budget import DEFAULT, ReadBudget
from tfrecord_torch.io.files import filesystem, is_url, local, pread_all, ranged

if TYPE_CHECKING:
    from concurrent.futures import Future

    from tfrecord_torch.io.copies import ShardCopies
    from tfrecord_torch.io.filling import FillView
    from tfrecord_torch.io.listing import ListingCheck

__all__ = ["REQUEST_THREADS", "Reader", "ReaderPool", "read_at"]

REQUEST_THREADS = 32
"""The most range requests of one :class:`ReaderPool` in flight at once: its
request threads (:attr:`ReaderPool.requests`), started at its first remote
reads and joined by :meth:`ReaderPool.close`."""

# Bumped in a forked child: readers and pools compare it to notice a fork
# (and reopen) without an os.getpid() system call on every read.
_fork_generation = 0


def _forked() -> None:
    global _fork_generation
    _fork_generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class Reader:
    """Positioned reads of one file: ``pread`` locally, one range request
    remotely -- or ``pread`` of the URL's local copy when ``copies`` holds
    one, or of the part of it written while the copy is filled (waiting for
    the fill to reach the bytes asked: one download serves both). Reopens in
    a forked child.

    A URL read from the bucket is checked against its listing
    (``listing``, or the copies' own; once per iteration: a fill being
    followed checks the bytes it writes itself), so that an object
    rewritten since is a :class:`RemoteError`, not its new bytes read
    through an index of its former self. With ``requests``, the check (a
    listing of the folder) runs on them while the first ranges are
    fetched, and no bytes are returned before it has passed (one round
    trip before the first record, not two); without, it is made before
    the first read.

    ``requests``: the threads that read its ranges in flight together
    (:func:`~tfrecord_torch.io.ranges.iter_ranges`), its pool's; None: each
    such read starts threads of its own and joins them when it ends.

    ``budget``: how far past a fill's written part a read that need not wait
    goes to the bucket (its ``far``), and how its ranges are requested
    (its ``requests``, :mod:`~tfrecord_torch.io.ranges`); its pool's."""

    def __init__(self, path: str, storage_options: dict | None = None,
                 copies: ShardCopies | None = None, listing: ListingCheck | None = None,
                 requests: OwnedPool | None = None, budget: ReadBudget = DEFAULT) -> None:
        self.path, self._storage_options, self.requests, self.budget = path, storage_options, requests, budget
        self._url = is_url(path)
        self._copies = copies if copies is not None and copies.covers(path) else None
        self._listing = copies.listing if copies is not None else listing
        self._handle: Any = None  # a descriptor, or (filesystem, path) for a URL
        self._local = not self._url  # the handle is a descriptor (a local file, or a URL's copy)
        self._view: FillView | None = None  # reads of the URL's copy being filled, before the bucket
        self._dropped: list[FillView] = []  # views of fills that ended, closed with the reader
        self._fork_generation = -1  # the fork generation that opened the handle
        self._checked: Future[None] | None = None  # the listing check of a URL read from the bucket, under way

    def _open(self) -> None:
        if self._fork_generation != _fork_generation or self._handle is None:
            self._fork_generation = _fork_generation
            self._handle, self._local, self._view, self._dropped = None, not self._url, None, []
            self._checked = None
            if not self._url:
                self._handle = os.open(local(self.path), os.O_RDONLY | getattr(os, "O_BINARY", 0))
                return
            fd = self._copies.open_now(self.path) if self._copies is not None else None
            if fd is None and self._copies is not None:
                self._view = self._copies.fill_view(self.path)
            if fd is None and self._view is None:
                self._begin_check()
            self._handle, self._local = (fd, True) if fd is not None else \
                (filesystem(self.path, self._storage_options), False)

    def _check_listed(self) -> None:
        """Raise :class:`RemoteError` if the URL, about to be read from the
        bucket, is not the object listed (asked once per iteration)."""
        if self._url and self._listing is not None:
            self._listing.check(self.path)

    def _begin_check(self) -> None:
        """Begin :meth:`_check_listed` on the request threads, to run while
        the first ranges are fetched (:meth:`_passed` waits for it); without
        them (or once checked), make it now. The check is queued before any
        read that waits for it, so it never waits behind them."""
        if not self._url or self._listing is None or self._listing.checked(self.path):
            return
        if self.requests is None or threading.current_thread().name.startswith(f"{self.requests.name}_"):
            self._check_listed()  # on a request thread: queued behind reads, the check could wait on them
        else:
            self._checked = self.requests.submit(self._check_listed)

    def _passed(self) -> None:
        """Wait for the check begun by :meth:`_begin_check` (raising its
        :class:`RemoteError`); the bytes fetched meanwhile are returned only then."""
        checked = self._checked
        if checked is not None:
            checked.result()

    def _fetch(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` from the bucket, returned once the
        object is known to be the one listed. A read that fails while the
        check is under way reports the check's error first (an object
        rewritten shorter fails its ranges)."""
        try:
            data = self._request(offset, size)
        except Exception:
            self._passed()
            raise
        self._passed()
        return data

    def refresh(self) -> None:
        """Read a URL from its copy from the next read on, if this reader reads
        the bucket and the copy has become complete (a set lookup, or a stat)."""
        if self._copies is not None and self._handle is not None and not self._local and \
                self._fork_generation == _fork_generation and self._copies.held(self.path):
            self._close_view()
            self._handle = None

    def remote(self, wait: bool = True) -> bool:
        """Whether reads go to the bucket (so several in flight pay off). A
        copy being filled is read one read at a time when its reads ``wait``
        for the fill (reads in order, at the fill's pace); else its reads go
        in flight too, each one taking the bytes the fill has or will soon
        have, and the bucket's for the rest (see :meth:`read`)."""
        self._open()
        return not self._local and (self._view is None or not wait)

    def filling(self) -> bool:
        """Whether reads of this URL come from its copy as it is being filled."""
        self._open()
        return not self._local and self._view is not None

    def descriptor(self) -> int | None:
        """The open file descriptor of a local file or of a URL's local copy
        (None when a URL is read from the bucket), for positioned reads of
        one's own while this reader is lent to the caller."""
        self._open()
        return self._handle if self._local else None

    def read(self, offset: int, size: int, wait: bool = True, far: int | None = None) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end of the file).

        A URL whose copy is being filled is read from the fill: the read
        waits for the fill to reach the bytes, or, without ``wait``, reads
        them from the bucket when they lie more than ``far`` bytes (default
        the budget's ``far``) past what the fill has written (a random read far
        ahead of a fill just begun: one range request costs less than the wait).
        A ``far`` given is a first read's (:attr:`ReadBudget.first`): it waits
        only for bytes in the fill's first ``far`` bytes, never for a later range.
        """
        self._open()
        if self._local:
            data = pread_all(self._handle, size, offset)
            if self._url and len(data) < size:
                return self._short_copy(offset, size, data)
            return data
        view = self._view
        if view is not None:
            filled = view.read(offset, size, far=None if wait else self.budget.far if far is None else far,
                               within=None if wait else far)
            if isinstance(filled, bytes):
                return filled
            if filled is None:  # no fill will bring these bytes: the bucket, from now on
                self._view = None  # closed by close() or refresh(): another thread may be reading it
                self._dropped.append(view)
                self._check_listed()
        return self._fetch(offset, size)

    def _request(self, offset: int, size: int) -> bytes:
        """One range request of ``size`` bytes at ``offset`` of the URL."""
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

    def _short_copy(self, offset: int, size: int, data: bytes) -> bytes:
        """A read of a URL's copy came back short: at the object's end, or the
        copy was cut by another process (then the object is copied again, once)."""
        assert self._copies is not None  # a URL reads a descriptor only through its copy
        listed = self._copies.stat(self.path)[0]
        wanted = min(size, max(listed - offset, 0))
        if len(data) >= wanted:
            return data  # the end of the object
        entry = self._copies.entry(self.path)
        self.close()
        self._open()  # the cache drops a copy of the wrong size and copies the object again
        if not self._local:  # the cache cannot hold it now: the bucket
            return self.read(offset, size)
        again = pread_all(self._handle, size, offset)
        if len(again) < wanted:
            raise RemoteError(self.path, f"read of bytes {offset}-{offset + size}: the cached copy at {entry} "
                                         f"holds {os.fstat(self._handle).st_size} bytes, not the {listed} "
                                         "listed: another process is cutting the shard cache's files; "
                                         "clear it (`tfrecord-torch cache --clear`)")
        return again

    def _close_view(self) -> None:
        if self._fork_generation == _fork_generation:
            for view in (self._view, *self._dropped):
                if view is not None:
                    view.close()
        self._view, self._dropped = None, []

    def close(self) -> None:
        if self._handle is not None and self._fork_generation == _fork_generation and self._local:
            os.close(self._handle)
        self._close_view()
        self._handle = None

    def __getstate__(self):
        return {**self.__dict__, "_handle": None, "_view": None, "_dropped": [], "_fork_generation": -1,
                "_checked": None}

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
    parent's descriptors and connections are not shared). ``copies``,
    ``listing`` and ``budget`` are given to its readers (see :class:`Reader`).

    The pool owns the threads its readers' range requests run on
    (:attr:`requests`, at most :data:`REQUEST_THREADS`, started at the first
    requests in flight together): :meth:`close` joins them.

    Example:
        >>> pool = ReaderPool()
        >>> with pool.borrow("data.tfrecord") as reader:  # doctest: +SKIP
        ...     header = reader.read(0, 12)
    """

    def __init__(self, storage_options: dict | None = None, limit: int = 16,
                 copies: ShardCopies | None = None, listing: ListingCheck | None = None,
                 budget: ReadBudget = DEFAULT) -> None:
        self.storage_options, self.limit, self.copies, self.listing = storage_options, limit, copies, listing
        self.budget = budget
        self.requests = OwnedPool(REQUEST_THREADS, "tfrecord_torch-read")
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        # path -> its idle readers (the most recently returned last); the dict's
        # order is the order the paths were last returned to, oldest first
        self._free: dict[str, list[Reader]] = {}
        self._count = 0  # idle readers
        self._fork_generation = _fork_generation
        self._epoch = 0  # bumped by close(): a thread's kept reader goes back at its next read
        self._local = threading.local()  # per thread: (path, reader, epoch) kept by read()

    def _check_fork(self) -> None:
        # forked: the parent's readers (and lock state) are not ours
        if self._fork_generation != _fork_generation:
            self._reset()

    def _take(self, path: str) -> Reader:
        if self._fork_generation != _fork_generation:
            self._reset()
        with self._lock:
            free = self._free.get(path)
            reader = free.pop() if free else None
            if reader is not None:
                self._count -= 1
                if not free:
                    del self._free[path]
        if reader is None:
            return Reader(path, self.storage_options, self.copies, self.listing, self.requests, self.budget)
        reader.refresh()  # a copy completed since: read it from now on
        return reader

    def _give_back(self, path: str, reader: Reader) -> None:
        if self._fork_generation != _fork_generation:
            self._reset()
        evicted = []
        with self._lock:
            free = self._free.pop(path, None)  # re-inserted: now the most recently returned path
            if free is None:
                free = []
            self._free[path] = free
            free.append(reader)
            self._count += 1
            while self._count > self.limit:  # close the least recently returned first
                oldest = next(iter(self._free))
                readers = self._free[oldest]
                evicted.append(readers.pop(0))
                self._count -= 1
                if not readers:
                    del self._free[oldest]
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
        """``size`` bytes of ``path`` at ``offset`` (fewer at the end of the file).

        Each thread keeps the reader of the last path it read until it reads
        another path (then it goes back to the pool): a run of reads of one
        file, the usual random access, takes no lock. A kept reader is lent,
        so no other thread uses it and nothing closes it.
        """
        return self._kept(path).read(offset, size)

    def let_go(self) -> None:
        """Give back the reader this thread keeps (see :meth:`read`), as a
        thread that is about to end does: the reader goes back to the pool
        (for the next thread to use) rather than closing with the thread."""
        self._check_fork()
        kept = getattr(self._local, "kept", None)
        if kept is not None:
            self._local.kept = None
            self._give_back(kept[0], kept[1])

    def descriptor(self, path: str) -> int | None:
        """The file descriptor of ``path`` (None for a URL), kept for this
        thread as :meth:`read` keeps its reader: valid for positioned reads
        until this thread reads another path or closes the pool."""
        kept = getattr(self._local, "kept", None)
        if kept is not None and len(kept) == 4 and kept[0] == path and kept[2] == self._epoch and \
                self._fork_generation == _fork_generation:
            return kept[3]
        reader = self._kept(path)
        fd = reader.descriptor()
        self._local.kept = (path, reader, self._epoch, fd)  # as _kept left it, with the descriptor
        return fd

    def _kept(self, path: str) -> Reader:
        if self._fork_generation != _fork_generation:
            self._reset()
        kept = getattr(self._local, "kept", None)
        if kept is not None:
            if kept[0] == path and kept[2] == self._epoch:
                return kept[1]
            self._local.kept = None
            self._give_back(kept[0], kept[1])
        reader = self._take(path)
        self._local.kept = (path, reader, self._epoch)
        return reader

    def close(self) -> None:
        """Close the idle readers and join the request threads (their reads
        in flight finish first); a reader a thread keeps (see :meth:`read`)
        goes back to the pool at that thread's next read, or closes with the
        thread. The pool stays usable: later reads open readers and start
        threads again."""
        self._check_fork()
        self.requests.close()
        self.let_go()  # this thread's own kept reader: not in use now
        with self._lock:
            self._epoch += 1
            idle = [r for readers in self._free.values() for r in readers]
            self._free.clear()
            self._count = 0
        for r in idle:
            r.close()

    def __repr__(self) -> str:
        return f"ReaderPool(idle={self._count}, limit={self.limit})"

    def __getstate__(self) -> dict:
        return {"storage_options": self.storage_options, "limit": self.limit, "copies": self.copies,
                "listing": self.listing, "budget": self.budget}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.requests = OwnedPool(REQUEST_THREADS, "tfrecord_torch-read")
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
