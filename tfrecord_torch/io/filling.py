"""Reading a remote shard's copy while the shard cache fills it.

A fill (:func:`tfrecord_torch.io.shardcache.open_shard`) writes the object in
order into the entry's fill file (:func:`~tfrecord_torch.io.shardcache.fill_path`),
holds an exclusive flock on it for as long as it runs, renames it to the entry
once complete and checked, and cuts it to 0 bytes before removing it when it
gives the copy up. So, while its writer holds the flock, every byte below the
fill file's size is the object's as the fill fetched it: a reader on the
machine (another thread, DataLoader worker or rank) that needs bytes of a shard
being copied waits for the fill to reach them and reads them there, instead of
fetching the same bytes from the bucket a second time.

A fill file whose writer is gone (a killed process) is never read: its bytes
were not checked and may not have reached the disk. A reader whose fill ends
without the bytes it needs (given up, failed, killed) reads the complete copy
if one is there, waits for the fill this process or another one runs next, and
otherwise is told to read the bucket. A fill may be given up between a reader's
look at its size and its read: that read comes back short, and the reader looks
again (never hands on the short bytes).
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tfrecord_torch.io import atomic
from tfrecord_torch.io.files import RemoteFile, pread_all
from tfrecord_torch.io.shardcache import fill_path, open_complete

__all__ = ["FAR", "POLL", "Far", "FillFile", "FillView", "can_watch", "lock_held"]

POLL = 0.003  # seconds between two looks at a fill in progress (a 4 MiB range takes ~40 ms at 100 MB/s)


def can_watch() -> bool:
    """Whether this platform tells a live fill from a killed one (flock)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


class FillView:
    """Positioned reads of one shard's copy while it is filled, by whoever fills it.

    Args:
        entry: the copy's path in the cache.
        size: the object's size as listed.
        pending: whether this process has the fill queued or running (so a
            missing fill file means "not begun yet", not "no fill").
        queued: whether this process has the fill queued behind others, not
            begun (a read that need not wait goes to the bucket then).

    Thread-safe: a descriptor it reads is closed only by :meth:`close`.
    """

    def __init__(self, entry: str, size: int, pending: Callable[[], bool],
                 queued: Callable[[], bool] = lambda: False) -> None:
        self.entry, self.size, self._pending, self._queued = entry, size, pending, queued
        self._lock = threading.Lock()
        self._fill: int | None = None  # a descriptor of the live fill file watched
        self._complete: int | None = None  # a descriptor of the complete copy, once there
        self._ended: list[int] = []  # descriptors of fills that ended, closed with the view

    @property
    def complete(self) -> bool:
        """Whether reads come from the complete copy."""
        return self._complete is not None

    def read(self, offset: int, size: int, *, far: int | None = None, within: int | None = None
             ) -> bytes | None | Far:
        """``size`` bytes at ``offset`` (fewer at the object's end), once the
        fill has written them; None when no fill will: read the bucket.

        ``far``: return :data:`FAR` at once (read these bytes from the bucket,
        the fill goes on) when they end more than ``far`` bytes past what the
        fill has written; None: wait for it. ``within`` (with ``far``): also
        when they are not written yet and end past byte ``within`` of the
        object: a first read waits for the fill's first range and no later one.
        """
        want = min(offset + size, self.size)
        while True:
            with self._lock:
                fd, written = self._look(want)
            if fd is not None:
                if fd == self._complete:
                    data = pread_all(fd, size, offset)
                    return data if len(data) >= want - offset else None  # a copy cut by another process
                if want <= offset:
                    return b""
                data = pread_all(fd, want - offset, offset)
                if len(data) == want - offset:
                    return data
                # the fill was given up since the look (cut to 0 bytes before it is let go): look again
                continue
            if written is None:
                return None
            if far is not None and (written < 0 or want - written > far or (within is not None and want > within)):
                return FAR
            time.sleep(POLL)

    def _look(self, want: int) -> tuple[int | None, int | None]:
        """(a descriptor holding bytes up to ``want``, None) or (None, bytes
        written so far: wait; -1 for a fill of ours queued behind others) or
        (None, None): no fill will write them."""
        if self._complete is not None:
            return self._complete, None
        if self._fill is None:
            self._fill = _open_live(fill_path(self.entry))
        if self._fill is not None:
            written = os.fstat(self._fill).st_size
            if written >= want:
                return self._fill, None
            if _held(self._fill):
                return None, written
            self._ended.append(self._fill)  # its writer ended (its bytes are in the entry) or gave up
            self._fill = None
        self._complete = open_complete(self.entry, self.size)
        if self._complete is not None:
            return self._complete, None
        if self._pending():
            # queued behind this process's other fills: with a global shuffle the first group
            # touches every shard and fills run a few at a time, so it may begin only after them
            if self._queued() and not lock_held(self.entry + ".lock"):
                return None, -1
            return None, 0  # about to begin (or checking the object first)
        if lock_held(self.entry + ".lock"):
            return None, 0  # a fill is about to begin (or checks the object first)
        self._complete = open_complete(self.entry, self.size)  # ended between the two looks
        return self._complete, None

    def close(self) -> None:
        with self._lock:
            for fd in (self._fill, self._complete, *self._ended):
                if fd is not None:
                    os.close(fd)
            self._fill = self._complete = None
            self._ended = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class Far:
    """The type of :data:`FAR`."""

    def __repr__(self) -> str:
        return "FAR"


FAR = Far()
"""What :meth:`FillView.read` gives for bytes the fill will not reach soon."""


class FillFile(io.RawIOBase):
    """A remote shard streamed from its copy as it is filled (a
    :class:`FillView`), and from the bucket from where no fill will reach.

    Args:
        view: the copy being filled.
        url: the shard (the file's ``name``, and the bucket to fall back on).
        storage_options: fsspec options for ``url``.
    """

    def __init__(self, view: FillView, url: str, storage_options: dict | None = None) -> None:
        self.name, self._view, self._storage_options = url, view, storage_options
        self._pos = 0
        self._bucket: Any = None  # a RemoteFile from where the view gave up

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._view.size}[whence]
        if base + offset != self._pos:
            self._drop_bucket()
        self._pos = base + offset
        return self._pos

    def readinto(self, b) -> int:
        n = min(len(b), max(self._view.size - self._pos, 0))
        if n == 0:
            return 0
        data = None if self._bucket is not None else self._view.read(self._pos, n)
        if not isinstance(data, bytes):
            if self._bucket is None:
                self._bucket = RemoteFile(self.name, self._storage_options, self._pos, self._view.size)
            data = self._bucket.read(n)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def _drop_bucket(self) -> None:
        if self._bucket is not None:
            self._bucket.close()
            self._bucket = None

    def close(self) -> None:
        self._drop_bucket()
        self._view.close()
        super().close()


def _open_live(path: str) -> int | None:
    """A descriptor of the fill file at ``path`` if a live writer holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError:  # none there, or a cache folder that cannot be read: no fill to follow
        return None
    if _held(fd):
        return fd
    os.close(fd)  # a killed writer's, or one that has just ended
    return None


def _held(fd: int) -> bool:
    """Whether another open file holds an exclusive flock on ``fd``'s file."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def lock_held(path: str) -> bool:
    """Whether a fill holds the entry's lock file ``path`` (one is running or
    about to); False where there is no flock."""
    if not can_watch():
        return False
    try:
        fd = atomic.lock_file(path, wait=False)
    except OSError:  # no cache folder yet: nobody fills
        return False
    if fd is None:
        return True
    atomic.unlock(path, fd)
    return False
