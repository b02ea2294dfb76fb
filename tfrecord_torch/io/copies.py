"""A dataset's remote shards as the shard cache keeps them, and the thread that
copies a reader's next shards ahead of it.

:class:`ShardCopies` binds a :class:`~tfrecord_torch.io.shardcache.ShardCache` to
what the dataset's listing saw of each remote shard (size and ETag), so a copy is
keyed on the object the dataset's indexes describe. Each object is asked again the
first time an iteration uses its copy (a :class:`~tfrecord_torch.io.listing.ListingCheck`:
one listing of its folder for all of the dataset's objects there, else a stat): an
object rewritten since the listing raises :class:`~tfrecord_torch.errors.RemoteError`
instead of serving the copy of its former self. :class:`CopyAhead` fills the copies of the shards a
reader reads next, in its order, while it reads the current ones.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Union

from tfrecord_torch.io import files as fs
from tfrecord_torch.io import filling
from tfrecord_torch.io.budget import DEFAULT, ReadBudget
from tfrecord_torch.io.filling import FillFile, FillView, can_watch
from tfrecord_torch.io.listing import ListingCheck
from tfrecord_torch.io.shardcache import ShardCache, auto_shard_cache, entry_path, open_shard

__all__ = ["FILLS", "MAX_FILLS", "CacheArg", "CopyAhead", "ShardCopies", "copy_ahead", "copy_in_use", "damaged_copy", "dataset_copies",
           "fills_for"]

CacheArg = Union[ShardCache, str, None]
"""A dataset's ``cache=``: a :class:`ShardCache`, ``"auto"`` or None."""

log = logging.getLogger(__name__)

_in_use: dict[str, str] = {}  # URL -> the copy this process last opened for it


def copy_in_use(url: str) -> str | None:
    """The copy of ``url`` this process reads (None if it reads none)."""
    return _in_use.get(url)


class ShardCopies:
    """Local copies of a dataset's remote shards.

    Args:
        cache: where and how much to keep.
        stats: each remote shard's (size, version) as listed; a shard missing
            here is asked for them when first opened.
        storage_options: fsspec options for the URLs.
        fills: shards copied at once in the background (default :data:`FILLS`).
        budget: how a fill's first ranges grow (a reader following it waits
            for its first range).

    Thread-safe. :meth:`fresh` gives the same copies with nothing checked yet
    (one per iteration, so each epoch asks each object once whether it changed).
    """

    def __init__(self, cache: ShardCache, stats: Mapping[str, tuple[int, str]],
                 storage_options: dict | None = None, fills: int | None = None,
                 budget: ReadBudget = DEFAULT) -> None:
        self.cache, self.storage_options, self.budget = cache, storage_options, budget
        self.fills = FILLS if fills is None else fills  # shards copied at once in the background
        self._stats = dict(stats)
        self.listing = ListingCheck(self._stats, storage_options)  # objects found unchanged, this iteration
        self._held: set[str] = set()  # objects with a complete copy, found this iteration
        self._filler: _Filler | None = None
        self._opening: dict[str, threading.Lock] = {}  # held while an object is checked (or copied)
        self._lock = threading.Lock()

    def warn_if_too_small(self, shuffled: bool) -> None:
        """Log a warning when the shards are more than the cache holds and a
        shuffle reads them all at once: the copies would be evicted before reuse."""
        total = sum(size for size, _ in self._stats.values())
        if shuffled and total > self.cache.limit:
            log.warning("the shard cache's limit (%d bytes) is less than the %d bytes of remote shards a "
                        "shuffled epoch reads from all at once: copies will be evicted before they are "
                        "read again; raise ShardCache(limit=), or leave the cache out", self.cache.limit, total)

    def fresh(self, fills: int | None = None) -> ShardCopies:
        """These copies with no object checked yet, filled in the background
        ``fills`` shards at a time (default :data:`FILLS`; see :func:`fills_for`)."""
        return ShardCopies(self.cache, self._stats, self.storage_options, fills, self.budget)

    def covers(self, path: Any) -> bool:
        """Whether ``path`` is a remote shard (local shards are never copied)."""
        return fs.is_url(path)

    def stat(self, url: str) -> tuple[int, str]:
        """``url``'s (size, version) as listed."""
        with self._lock:
            known = self._stats.get(url)
        if known is None:
            known = fs.size_and_version(url, self.storage_options)
            with self._lock:
                known = self._stats.setdefault(url, known)
        return known

    def entry(self, url: str) -> str:
        """Where ``url``'s copy is (or would be) kept."""
        size, version = self.stat(url)
        return entry_path(self.cache, url, size, version)

    def held(self, url: str) -> bool:
        """Whether ``url``'s complete copy is there to read, without copying
        anything (a stat of the copy; the first time in an iteration, the
        object's change check too). Once true, true for the iteration."""
        with self._lock:
            if url in self._held:
                return True
        fd = self.open(url, fill=False)
        if fd is None:
            return False
        os.close(fd)
        with self._lock:
            self._held.add(url)
        return True

    def open(self, url: str, cancel: threading.Event | None = None, fill: bool = True) -> int | None:
        """A read-only descriptor of ``url``'s complete copy (filled if
        missing, unless ``fill`` is False), or None: read it from the bucket
        (a full cache disk, a shard larger than the limit, ``cancel`` set, or
        no complete copy and no ``fill``).

        Raises:
            RemoteError: the object changed since it was listed.
        """
        size, version = self.stat(url)
        checked = self.listing.checked(url)
        if not checked and _complete(entry_path(self.cache, url, size, version), size):
            # a copy to serve: one listing of its folder checks the dataset's objects there (on a warm
            # cache of many shards, a stat each in series held the first batch for seconds)
            checked = self.listing.by_listing(url)
        if checked:
            fd = open_shard(url, self.cache, size=size, version=version, storage_options=self.storage_options,
                            cancel=cancel, fill=fill, budget=self.budget)
        else:
            with self._lock:
                opening = self._opening.setdefault(url, threading.Lock())
            fd = self._open_checked(url, size, version, opening, cancel, fill)
        if fd is not None:
            _in_use[url] = entry_path(self.cache, url, size, version)
        return fd

    def _open_checked(self, url: str, size: int, version: str, opening: threading.Lock,
                      cancel: threading.Event | None, fill: bool) -> int | None:
        if not fill and not _complete(entry_path(self.cache, url, size, version), size):
            return None  # not there (or being filled): no waiting for another thread's fill
        opening.acquire()  # a second thread opening it meanwhile waits, then needs no check of its own
        try:
            recheck = not self.listing.checked(url)
            fd = open_shard(url, self.cache, size=size, version=version, storage_options=self.storage_options,
                            recheck=recheck, cancel=cancel, fill=fill, budget=self.budget)
            if fd is not None:
                self.listing.confirm(url)
        finally:
            opening.release()
        return fd

    def open_now(self, url: str) -> int | None:
        """A read-only descriptor of ``url``'s copy if it is complete, else
        None (read it from the bucket) and the copy is filled in the
        background, a few shards at a time, in the order they are asked for.
        Waits for no fill (the change check, one stat, is made here).

        Raises:
            RemoteError: the object changed since it was listed.
        """
        fd = self.open(url, fill=False)
        if fd is None:
            self.fill_later(url)
        return fd

    def followed(self, url: str) -> bool:
        """Whether ``url``'s copy can be read while it is filled (see
        :meth:`fill_view`): not a shard larger than the limit, nor a platform
        without flock."""
        return self.stat(url)[0] <= self.cache.limit and can_watch()

    def fill_view(self, url: str) -> FillView | None:
        """Reads of ``url``'s copy as it is filled (by this process or another
        one on the machine), for a reader that :meth:`open_now` found no
        complete copy for; None where no copy can be read in progress (see
        :meth:`followed`): read the bucket."""
        size, version = self.stat(url)
        if not self.followed(url):
            return None
        return FillView(entry_path(self.cache, url, size, version), size, lambda: self._fill_pending(url),
                        lambda: self._fill_queued(url))

    def _fill_pending(self, url: str) -> bool:
        """Whether this process's background fills have ``url`` queued or in progress."""
        with self._lock:
            filler = self._filler
        return filler is not None and filler.pid == os.getpid() and filler.pending(url)

    def _fill_queued(self, url: str) -> bool:
        """Whether this process's background fills have ``url`` queued, not begun."""
        with self._lock:
            filler = self._filler
        return filler is not None and filler.pid == os.getpid() and filler.queued(url)

    def fill_later(self, url: str, ended: Callable[[], None] | None = None) -> None:
        """Copy ``url`` in the background (:meth:`open_now`'s fills: the
        copies' one work queue, in the order asked; a shard asked for twice
        is copied once). ``ended`` is called (on the fill's thread) when
        that fill ends, whether or not it made a copy."""
        with self._lock:
            if self._filler is None or self._filler.pid != os.getpid():  # none yet, or forked
                self._filler = _Filler(self)
            filler = self._filler
        filler.request(url, ended)

    def filled(self, url: str) -> None:
        """A background fill of ``url`` ended with a complete, checked copy."""
        with self._lock:
            self._held.add(url)

    def close(self, finish: bool = False) -> None:
        """Stop the background fills (a fill in progress is given up between
        two range requests) and wait for them; later requests start anew.
        ``finish``: first let the fills asked for end (an epoch read to its
        end: the next one reads the copies)."""
        with self._lock:
            filler, self._filler = self._filler, None
        if filler is not None and filler.pid == os.getpid():
            filler.close(finish)

    def open_file(self, url: str, fill: bool = False):
        """``url``'s copy as an unbuffered binary file named ``url`` (for
        streaming), or None: stream it from the bucket. Without a complete
        copy, the copy is filled in the background (see :meth:`open_now`) and
        the file reads it as it is filled (:class:`FillFile`). ``fill``: make
        the copy now, waiting for it (for a caller that reads the whole object
        anyway)."""
        fd = self.open(url) if fill else self.open_now(url)
        if fd is None:
            view = None if fill else self.fill_view(url)
            return None if view is None else FillFile(view, url, self.storage_options)
        f = open(fd, "rb", buffering=0)
        try:
            f.name = url  # errors name the shard, not the copy
        except AttributeError:
            pass
        return f

    def __getstate__(self) -> dict:  # a lock does not pickle (spawned DataLoader workers)
        return {"cache": self.cache, "storage_options": self.storage_options, "_stats": self._stats,
                "fills": self.fills, "budget": self.budget}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.listing = ListingCheck(self._stats, self.storage_options)
        self._opening, self._held, self._filler = {}, set(), None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ShardCopies({self.cache!r}, {len(self._stats)} shards)"


FILLS = 3  # shards one iterator copies at once in the background (each by parallel range requests), at least
MAX_FILLS = 8  # ... and at most (see fills_for)
RECHECK = 0.05  # seconds between two looks at the fills of other processes, while every queued shard is theirs


def fills_for(shards: int, readers: int) -> int:
    """How many shards each of ``readers`` readers (the DataLoader workers)
    copies at once, for a read of ``shards`` remote shards: their share,
    between :data:`FILLS` and :data:`MAX_FILLS`. A shuffled read takes records
    of all its shards from its first group on; the records of a shard whose
    copy waits behind others come from the bucket, a request each (some 1-2
    ms of CPU, where a copy costs about 0.1 ms per 100 KB record), and the
    workers' shares keep the copying (and the CPU of receiving it) spread
    over them."""
    return min(MAX_FILLS, max(FILLS, -(-shards // max(readers, 1))))


class _Filler:
    """Copies the shards asked for into the cache on up to ``copies.fills``
    threads, in the order asked, each once at a time; a thread ends when
    nothing is left to copy.

    Not the library's producer loop (:class:`~tfrecord_torch._threads.Producer`):
    this is a work queue, several threads taking requests that arrive while
    they run, in the order of the locks they find free, and handing nothing
    back (a copy is found in the cache; a failed one is met again, and
    raised, by the reader reading the bucket)."""

    def __init__(self, copies: ShardCopies) -> None:
        self.copies, self.pid = copies, os.getpid()
        self._queue: collections.deque[str] = collections.deque()
        self._pending: set[str] = set()  # queued or being copied
        self._ended: dict[str, list[Callable[[], None]]] = {}  # called when the url's fill ends
        self._busy = 0  # threads copying a shard
        self._taking = 0  # threads that will take another shard (not those ending: alive a while yet)
        self._threads: list[threading.Thread] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()

    def request(self, url: str, ended: Callable[[], None] | None = None) -> None:
        with self._cond:
            if self._stop.is_set():
                return
            if ended is not None:
                self._ended.setdefault(url, []).append(ended)
            if url in self._pending:
                return
            self._pending.add(url)
            self._queue.append(url)
            self._cond.notify_all()  # a thread waiting for held fills may take this one
            self._threads = [t for t in self._threads if t.is_alive()]
            if self._taking < self.copies.fills:  # (a thread that found the queue empty is ending)
                thread = threading.Thread(target=self._run, daemon=True, name="tfrecord_torch-copy-ahead")
                thread.start()
                self._taking += 1  # (the thread counts itself out under this lock, taken after this)
                self._threads.append(thread)

    def queued(self, url: str) -> bool:
        """Whether ``url`` waits behind other fills: queued further back than
        the threads free to take it (one about to be taken is not)."""
        with self._cond:
            if url not in self._queue:
                return False
            return self._queue.index(url) >= self.copies.fills - self._busy

    def pending(self, url: str) -> bool:
        """Whether ``url`` is queued or being copied."""
        with self._cond:
            return url in self._pending

    def _take(self) -> str | None:
        """The next shard to copy, taken off the queue (None: nothing left): the
        first one no other fill holds the lock of; while every queued one is
        held, the thread waits for a new request or for one of those fills to
        end (:data:`RECHECK`). A fill of another process (a DataLoader worker,
        a rank) is let run while this one copies a shard nobody copies yet: the
        workers of a shuffle, which all ask for every shard at once, share the
        copying (and the CPU of receiving it) instead of the first one to lock
        taking it all."""
        while True:
            with self._cond:
                if self._stop.is_set() or not self._queue:
                    self._taking -= 1  # this thread ends: a request from now on starts another
                    return None
                queued = list(self._queue)
            free = next((url for url in queued if not self._locked(url)), None)
            with self._cond:
                if self._stop.is_set():
                    self._taking -= 1
                    return None
                if free is None:
                    self._cond.wait(RECHECK)
                    continue
                if free in self._queue:  # another thread may have taken it meanwhile
                    self._queue.remove(free)
                    self._busy += 1
                    return free

    def _locked(self, url: str) -> bool:
        """Whether a fill (of any process) holds ``url``'s entry lock."""
        try:
            return filling.lock_held(self.copies.entry(url) + ".lock")
        except Exception:  # its stat failed: the fill taking it meets the error (and logs it)
            return False

    def _run(self) -> None:
        try:
            self._copy_until_empty()
        except BaseException:  # ended by an error: a request from now on starts another thread
            with self._cond:
                self._taking -= 1
            raise

    def _copy_until_empty(self) -> None:
        while True:
            url = self._take()
            if url is None:  # (_take counted this thread out)
                return
            try:
                fd = self.copies.open(url, cancel=self._stop)
            except Exception as e:  # the reader meets it again (reading the bucket) and raises it there
                log.debug("copying %s in the background failed: %s", url, e)
                fd = None
            if fd is not None:
                os.close(fd)
                self.copies.filled(url)
            with self._cond:
                self._pending.discard(url)
                self._busy -= 1
                ended = self._ended.pop(url, [])
            for call in ended:
                call()

    def close(self, finish: bool = False) -> None:
        if finish:  # each thread ends when the queue is empty
            for thread in list(self._threads):
                if fs.may_wait_for(thread):
                    thread.join()
        with self._cond:
            self._stop.set()
            self._queue.clear()
            self._ended.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if fs.may_wait_for(thread):
                thread.join()


class CopyAhead:
    """Asks for the copies of the shards a reader reads next, ahead of it.

    ``order`` gives the reader's remote shards in the order it first reads
    them (computed lazily, on this class's thread). The thread asks the
    copies' background fills (:meth:`ShardCopies.fill_later`: the one work
    queue, ``copies.fills`` shards copied at once) for the next shards while
    fewer than ``ahead`` asked for are still unread by the reader (those it
    said it began: :meth:`began`), or while they hold less than ``least``
    bytes: a bucket of small shards is copied several at a time, far enough
    ahead that the reader does not wait a round trip per shard. Until the
    reader begins its second read, it asks for ``ahead`` shards alone, one
    at a time: the first read (the first batch) has the bucket and the
    cores to itself. The reader
    opens its shards through the same cache: a shard being copied is
    followed as it is written (or waited for), not copied twice.

    :meth:`close` stops this thread (no shard is asked for after it); the
    fills asked for belong to the copies, whose
    :meth:`ShardCopies.close` gives up the one in progress or lets the asked
    ones end (``finish``: an epoch read to its end).

    Not the library's producer loop (:class:`~tfrecord_torch._threads.Producer`):
    nothing is handed to a consumer (the reader finds the copies in the
    cache, and meets a failed copy's error again itself), and the bound is
    the reader's position (:meth:`began`), not items it has taken.
    """

    def __init__(self, copies: ShardCopies, order: Iterable[str], ahead: int, least: int = 0) -> None:
        self.copies, self.ahead, self.least = copies, ahead, least
        self._copying: dict[str, int] = {}  # size of each shard asked for whose fill has not ended
        self._began: set[str] = set()
        self._reads = 0  # the reader's reads begun (began() calls)
        self._asked: collections.deque[tuple[str, int]] = collections.deque()  # (url, size) asked, not yet begun
        self._cond = threading.Condition()
        self._stop = threading.Event()  # nothing is asked for after it is set
        self._thread = threading.Thread(target=self._run, args=(iter(order),), daemon=True,
                                        name="tfrecord_torch-copy-ahead")
        self._thread.start()

    def began(self, urls: Iterable[str]) -> None:
        """The reader began reading ``urls``."""
        with self._cond:
            self._reads += 1
            self._began.update(urls)
            self._cond.notify_all()

    def _far_enough(self) -> bool:
        """Whether to ask for no more now (under the condition's lock): the
        shards asked for and not yet begun are ``ahead`` at least, holding
        ``least`` bytes at least; or those still being copied hold ``least``
        bytes (large shards are copied one after another, as the reader
        reads them). Before the reader's second read, ``least`` is 0."""
        asked = self._asked
        while asked and asked[0][0] in self._began:
            asked.popleft()
        least = self.least if self._reads > 1 else 0  # the first read's copies one at a time
        unread = [size for url, size in asked if url not in self._began]
        if len(unread) >= self.ahead and sum(unread) >= least:
            return True
        return bool(self._copying) and sum(self._copying.values()) >= least

    def _ended(self, url: str) -> None:
        """The fill of ``url`` ended (on its thread): look again."""
        with self._cond:
            self._copying.pop(url, None)
            self._cond.notify_all()

    def _run(self, order: Iterator[str]) -> None:
        try:
            for url in order:
                with self._cond:
                    while not self._stop.is_set() and self._far_enough():
                        self._cond.wait()
                if self._stop.is_set():
                    return
                try:
                    size = self.copies.stat(url)[0]
                    with self._cond:
                        self._asked.append((url, size))
                        self._copying[url] = size
                    self.copies.fill_later(url, functools.partial(self._ended, url))
                except Exception as e:  # the reader opening this shard meets it again and raises it
                    log.debug("copying %s ahead failed: %s", url, e)
        except Exception as e:  # working out the order; reading goes on without copies ahead
            log.warning("copying shards ahead stopped: %s", e)

    def close(self, finish: bool = False) -> None:
        """Stop the thread and wait for it: no shard is asked for after this
        call. ``finish`` is the copies' to honour (:meth:`ShardCopies.close`);
        it is taken here so that the session closes both alike."""
        del finish
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if fs.may_wait_for(self._thread):
            self._thread.join()

    def __enter__(self) -> CopyAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _complete(entry: str, size: int) -> bool:
    try:
        return os.stat(entry).st_size == size
    except OSError:
        return False


def dataset_copies(cache: CacheArg, paths: Iterable[Any], stats: Mapping[str, tuple[int, str]],
                   storage_options: dict | None, *, shuffled: bool, budget: ReadBudget = DEFAULT
                   ) -> ShardCopies | None:
    """The copies a dataset of ``paths`` reads its remote shards from, or None:
    range reads (no remote shards, ``cache=None``, or ``"auto"`` chose them).

    Args:
        cache: a :class:`ShardCache`, ``"auto"`` (:func:`auto_shard_cache`
            when some shard is a URL other than ``memory://``; decided here,
            once: DataLoader workers get the decision with the dataset) or None.
        paths: the dataset's shards.
        stats: (size, version) of the remote shards, as listed.
        storage_options: fsspec options for the URLs.
        shuffled: whether a reader reads from all shards at once (a shuffle,
            a sampler): then a cache smaller than the shards is warned about.
        budget: how the fills' first ranges grow.
    """
    remote = [p for p in paths if fs.is_url(p)]
    if cache is None or not remote:
        return None
    if isinstance(cache, str):  # "auto": the dataset's arguments were checked
        if all(p.startswith("memory://") for p in remote):  # this process's memory: a copy gains nothing
            return None
        cache = auto_shard_cache({p: stats[p] for p in remote if p in stats})
        if cache is None:
            return None
    copies = ShardCopies(cache, {p: stats[p] for p in remote if p in stats}, storage_options, budget=budget)
    copies.warn_if_too_small(shuffled)
    return copies


def copy_ahead(copies: ShardCopies | None, urls: Iterable[str]) -> CopyAhead | None:
    """A :class:`CopyAhead` of the remote shards among ``urls`` (in the order a
    reader first reads them), or None: no copies, or ``ahead=0``. It keeps
    the cache's ``ahead`` shards asked for ahead of the reader, and more
    while they hold less than the read budget's ``far`` bytes (about what
    one fill has in flight), and no more while the copies under way hold
    that much."""
    if copies is None or copies.cache.ahead == 0:
        return None
    return CopyAhead(copies, (url for url in urls if copies.covers(url)), copies.cache.ahead, copies.budget.far)


def damaged_copy(url: str, offset: int, size: int, storage_options: dict | None = None) -> str | None:
    """The copy of ``url`` this process reads, if its bytes ``[offset, offset +
    size)`` differ from the object's (another process damaged it); the copy is
    removed then, so the next read copies the object again. None: no copy, or
    it holds what the object holds."""
    entry = copy_in_use(url)
    if entry is None or size <= 0:
        return None
    try:
        with open(entry, "rb", buffering=0) as f:
            held = fs.pread_all(f.fileno(), size, offset)  # a short read (FUSE, NFS) is read on, not a difference
    except FileNotFoundError:
        return None
    if held == fs.read_range(url, offset, offset + size, storage_options):
        return None
    log.warning("removing the shard cache's copy %s of %s: its bytes %d-%d differ from the object's",
                entry, url, offset, offset + size)
    try:
        os.unlink(entry)
    except FileNotFoundError:
        pass
    _in_use.pop(url, None)
    return entry
