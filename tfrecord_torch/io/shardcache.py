"""A node-local copy of remote shards, shared by every reader on the machine.

Reading a bucket's shard by ranges costs a round trip per request; a local copy costs
one download and then reads at disk speed, for this epoch and the next. The design
follows mosaicml streaming's: whole shards are copied into a local folder, shared by
DataLoader workers, ranks and jobs on the machine, filled ahead of use, and kept under
a size bound by evicting the least recently used.

Safety, the reason this module is more than a download:

* **One download per shard.** An entry is filled under an exclusive lock on
  ``<entry>.lock``; a second reader (thread, worker, rank) waits and then finds it.
* **Never a half file in use.** The copy is written in order to a hidden
  ``.<entry>.fill.partial`` file, flocked by its writer, and renamed once complete,
  of the listed size and checked; a writer killed mid-download leaves an unlocked
  ``.partial`` that the next fill removes. While a fill runs, readers on the machine
  read the part it has written (:mod:`tfrecord_torch.io.filling`) rather than
  fetching those bytes again; a fill given up cuts its file to 0 bytes first.
* **Never a stale copy.** The entry's name hashes the URL with the object's size and
  version (ETag) as listed when the dataset was made; the object is checked again
  before and after the download (or, where each range's answer names the object's
  ETag, as S3's do, in every answer before its bytes are written), and an object
  that changed raises :class:`~tfrecord_torch.errors.RemoteError` rather than
  serving either version.
* **Evicting is safe.** An entry removed while another process reads it stays
  readable through its open descriptor (POSIX), and :func:`open_shard` returns a
  descriptor, not a path.
* **A full or unwritable cache disk** makes the read go to the bucket instead
  (logged once), never a truncated copy.

The datasets' default, ``cache="auto"``, is :func:`auto_shard_cache`: a cache in
the default folder when the dataset's remote shards fit, else range reads.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import logging
import os
import shutil
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from tfrecord_torch._pending import Done, Pending
from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import atomic, http
from tfrecord_torch.io import files as fs
from tfrecord_torch.io.budget import DEFAULT, ReadBudget
from tfrecord_torch.io.lru import LruFolder
from tfrecord_torch.io.streamed import Answer

__all__ = ["LIMIT", "ShardCache", "auto_shard_cache", "clear_shard_cache", "fill_path", "open_complete", "open_shard",
           "shard_cache_dir", "shard_cache_off", "shard_cache_usage"]

log = logging.getLogger(__name__)

SUFFIX = ".shard"
PARALLEL = 4  # range requests in flight per download (its byte budgets: ReadBudget.fill)
LIMIT = 32 << 30  # ShardCache()'s bound, and the most cache="auto" takes
ENV = "TFRECORD_TORCH_SHARD_CACHE"
OFF = frozenset({"off", "0", "false", "no", "none"})  # values of $TFRECORD_TORCH_SHARD_CACHE that turn "auto" off
_warned: set[str] = set()
_warned_lock = threading.Lock()


def shard_cache_dir() -> str:
    """The default shard cache: ``$TFRECORD_TORCH_SHARD_CACHE`` (a folder) or
    ``~/.cache/tfrecord_torch/shards`` (also when the variable is ``off``).
    Safe to delete when no job reads from it."""
    value = os.environ.get(ENV, "")
    if value and not shard_cache_off():
        return value
    return os.path.join(os.path.expanduser("~"), ".cache", "tfrecord_torch", "shards")


def shard_cache_off() -> bool:
    """Whether ``$TFRECORD_TORCH_SHARD_CACHE`` turns ``cache="auto"`` off
    (``off``, ``0``, ``false``, ``no`` or ``none``, in any case)."""
    return os.environ.get(ENV, "").strip().lower() in OFF


@dataclass(frozen=True)
class ShardCache:
    """Keep local copies of remote shards, under an explicit bound (the
    datasets' default, ``cache="auto"``, picks one: :func:`auto_shard_cache`).

    Attributes:
        directory: the cache folder (default :func:`shard_cache_dir`). Share it
            between jobs on one machine; do not put it on a network file system
            (its locks are ``flock``).
        limit: the bound on the copies' bytes (default 32 GiB); the least
            recently used copies are removed to stay under it. A shard larger
            than the whole bound is read from the bucket instead.
        ahead: how many shards, in the epoch's order, are copied ahead of the
            one being read; more, several at once, while they hold less
            than the read budget's ``far`` bytes (16 MiB), from the reader's
            second read on (:class:`~tfrecord_torch.io.copies.CopyAhead`).
    """

    directory: str | None = None
    limit: int = LIMIT
    ahead: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 0:
            raise ValueError(f"ShardCache(limit=) must be a number of bytes >= 0, got {self.limit!r}")
        if not isinstance(self.ahead, int) or isinstance(self.ahead, bool) or self.ahead < 0:
            raise ValueError(f"ShardCache(ahead=) must be an int >= 0, got {self.ahead!r}")

    @property
    def folder(self) -> str:
        """The cache folder in use."""
        return os.path.abspath(os.path.expanduser(self.directory)) if self.directory else shard_cache_dir()


def auto_shard_cache(listed: Mapping[str, tuple[int, str]]) -> ShardCache | None:
    """The cache ``cache="auto"`` gives a dataset whose remote shards are
    ``listed`` (URL -> size, version), or None: read them by range requests
    (the reason logged once).

    The cache is :func:`shard_cache_dir`, bounded by the least of 32 GiB and
    what the folder holds already plus half the free space of its disk, both
    measured now; nothing is created until the first copy is written. None when
    ``$TFRECORD_TORCH_SHARD_CACHE`` is ``off``; when a shard has no version
    (a server that sends no ETag): a copy could not be told from a rewritten
    object of the same size; when the folder (or, if it does not exist yet,
    its nearest existing parent) is not a writable folder; or when the shards
    are more bytes than that bound: copies evicted before the next epoch would
    cost a whole-shard download each time.
    """
    if shard_cache_off():
        _log_once(logging.INFO, f"{ENV}={os.environ.get(ENV)}: reading remote shards by range requests")
        return None
    folder = os.path.abspath(os.path.expanduser(shard_cache_dir()))
    choose = (f"to copy them, give Source(cache=ShardCache(directory=..., limit=...)) (or "
              f"IndexedTFRecordDataset(cache=...)); cache=None or {ENV}=off reads by range requests "
              "without this message")
    unversioned = sorted(url for url, (_, version) in listed.items() if not version)
    if unversioned:
        more = f" and {len(unversioned) - 1} more" if len(unversioned) > 1 else ""
        _log_once(logging.WARNING, f"{unversioned[0]}{more}: the server gives no version (ETag) of the object, "
                                   "so a copy could not be told from a rewritten object; reading the remote "
                                   f"shards by range requests; {choose}")
        return None
    remote_bytes = sum(size for size, _ in listed.values())
    existing = _nearest_existing(folder)
    try:
        free = shutil.disk_usage(existing).free
        usable = os.path.isdir(existing) and os.access(existing, os.W_OK | os.X_OK)
    except OSError as e:
        usable, free, why = False, 0, str(e)
    else:
        why = f"{existing} is not a writable folder"
    if not usable:
        _log_once(logging.WARNING, f"the shard cache {folder} cannot be written ({why}); reading the remote "
                                   f"shards by range requests; {choose}")
        return None
    held = LruFolder(folder, SUFFIX).usage()[1]
    limit = min(LIMIT, held + free // 2)
    if remote_bytes > limit:
        _log_once(logging.WARNING, f"the remote shards ({remote_bytes:,} bytes) are more than the shard cache "
                                   f"{folder} takes by default ({limit:,} bytes: the least of 32 GiB and "
                                   f"its {held:,} bytes of copies plus half of the disk's {free:,} free bytes); "
                                   f"reading them by range requests; {choose}")
        return None
    return ShardCache(folder, limit)


def _nearest_existing(folder: str) -> str:
    """``folder`` if it exists, else its nearest parent that does."""
    path = folder
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def entry_path(cache: ShardCache, url: str, size: int, version: str) -> str:
    """The cache entry of ``url`` as it was when listed (``size`` bytes, ``version``)."""
    key = f"{url}\0{size}\0{version}".encode("utf-8", "surrogateescape")
    name = os.path.basename(url.rstrip("/"))[:60] or "shard"
    return os.path.join(cache.folder, f"{name}.{hashlib.sha256(key).hexdigest()[:24]}{SUFFIX}")


def open_shard(url: str, cache: ShardCache, *, size: int, version: str,
               storage_options: dict | None = None, recheck: bool = False,
               cancel: threading.Event | None = None, fill: bool = True,
               budget: ReadBudget = DEFAULT) -> int | None:
    """A read-only descriptor of a complete local copy of ``url``, filled if
    missing; None when the cache cannot hold it (then read from the bucket).

    Args:
        url: the remote shard.
        cache: where and how much to keep.
        size: the object's size as listed (a copy of another size is not used).
        version: the object's version as listed (its ETag).
        storage_options: for the file system.
        recheck: ask the bucket (one stat) whether the object is still the
            listed one before using a copy already there (a fill checks anyway).
        cancel: set to give up a fill between its range requests (None is returned).
        fill: False: None when no complete copy is there (nothing is copied).
        budget: a fill's first range is ``budget.first`` bytes, each next
            twice the one before while below ``budget.fill.chunk`` (a reader
            following the fill starts on it); ``budget.fill``: how the fill
            asks for the rest and writes it.

    Raises:
        RemoteError: the object changed since it was listed, or could not be read.
    """
    if size > cache.limit:
        _warn_once(url, f"{url}: {size} bytes is more than the shard cache's limit ({cache.limit}); "
                        "reading it from the bucket")
        return None
    entry = entry_path(cache, url, size, version)
    fd = open_complete(entry, size)
    if fd is not None:
        if recheck:
            try:
                _check_unchanged(url, size, version, storage_options, "since it was listed")
            except BaseException:
                os.close(fd)
                raise
        LruFolder.touch(entry)
        return fd
    if not fill:
        return None
    try:
        os.makedirs(cache.folder, exist_ok=True)
        lock = atomic.lock_file(entry + ".lock", wait=True)
    except OSError as e:
        _warn_once(cache.folder, f"shard cache {cache.folder} is not usable ({e}); reading from the bucket")
        return None
    assert lock is not None  # wait=True
    try:
        fd = open_complete(entry, size)  # filled by whoever held the lock before us
        if fd is None:
            if not _fill(url, entry, cache, size=size, version=version, storage_options=storage_options,
                         cancel=cancel, budget=budget):
                return None
            fd = open_complete(entry, size)
    finally:
        atomic.unlock(entry + ".lock", lock)
    if fd is not None:
        LruFolder(cache.folder, SUFFIX).prune(cache.limit, keep=entry)
    return fd


def fill_path(entry: str) -> str:
    """Where ``entry`` is written while it is filled (under the entry's lock:
    one fill at a time)."""
    folder, base = os.path.split(entry)
    return os.path.join(folder, f".{base}.fill.partial")


def open_complete(entry: str, size: int) -> int | None:
    """A descriptor of ``entry`` if it exists with ``size`` bytes; an entry of
    another size (damaged by another process) is removed."""
    try:
        fd = os.open(entry, os.O_RDONLY)
    except OSError:  # none there, or a folder that cannot be read (a path through a file): no copy to read
        return None
    if os.fstat(fd).st_size == size:
        return fd
    os.close(fd)
    log.warning("removing a damaged shard cache entry %s (not %d bytes)", entry, size)
    try:
        os.unlink(entry)
    except FileNotFoundError:
        pass
    return None


def _fill(url: str, entry: str, cache: ShardCache, *, size: int, version: str,
          storage_options: dict | None, cancel: threading.Event | None = None,
          budget: ReadBudget = DEFAULT) -> bool:
    """Copy ``url`` into ``entry`` (under the entry's lock); False if the cache
    disk cannot hold it or ``cancel`` was set.

    The bytes are written in order into :func:`fill_path`, flocked while this
    fill runs, so that every byte below its size is the object's as fetched;
    a fill given up cuts it to 0 bytes before removing it and letting go of
    the flock (readers of the part written then read the bucket)."""
    folder, base = os.path.split(entry)
    atomic.remove_orphans(folder, os.path.basename(base))  # a killed filler's leftovers
    # where each range's answer names the object's version (an ETag, from S3), every answer is
    # checked against the listing before its bytes are written: each byte is the listed object's,
    # with no request of its own (~2 ms of CPU each) before or after the download
    answers = size > 0 and version.startswith('"') and fs.answers_checked(url, storage_options)
    check = _AnswerCheck(url, size, version) if answers else None
    # otherwise the object is asked whether it changed while the first ranges are on their way (one
    # round trip less before the first bytes); no byte is written before it answers
    checked: Pending[None] = Done(None) if check is not None else \
        _CheckSoon(url, size, version, storage_options, "before copying it")
    LruFolder(folder, SUFFIX).prune(max(0, cache.limit - size))  # make room first
    temp = fill_path(entry)
    kept = False
    try:
        fd = _create_fill(temp, size)
    except OSError as e:
        if check is not None:  # a changed object is an error, even on a full disk
            _check_unchanged(url, size, version, storage_options, "before copying it")
        checked.result()
        return _unwritable(folder, e)
    try:
        try:
            _download(url, fd, size, storage_options, cancel, checked, check, budget)
        except BaseException:
            checked.result()  # a changed object's error before what its ranges met
            raise
        if os.fstat(fd).st_size != size:  # cancelled: some ranges were left out
            return False
        checked.result()  # (an empty object writes nothing)
        os.fsync(fd)
        if check is None or check.unnamed:  # (an answer without an ETag: the object is asked once more)
            _check_unchanged(url, size, version, storage_options, "while it was being copied")
        os.replace(temp, entry)  # while the flock is held: a reader never sees a live fill end without it
        kept = True
    except OSError as e:  # the check has answered: raised above, or passed
        return _unwritable(folder, e)
    finally:
        if not kept:
            _give_up(fd, temp)
        else:
            os.close(fd)
    log.info("cached %s as %s", url, entry)
    return True


def _create_fill(path: str, size: int = 0) -> int:
    """A new, empty fill file at ``path``, flocked (a file there is a killed
    filler's: the caller holds the entry's lock), with ``size`` bytes of disk
    reserved (:func:`_reserve`)."""
    _discard(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        _reserve(fd, size)
    except OSError:
        os.close(fd)
        _discard(path)
        raise
    try:
        import fcntl
    except ImportError:  # no flock (Windows): readers do not read fills in progress there
        return fd
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


_FALLOC_FL_KEEP_SIZE = 1
_fallocate: list = []  # libc's fallocate, once looked up ([None] where there is none)


def _reserve(fd: int, size: int) -> None:
    """Allocate ``size`` bytes of disk for ``fd``'s file, its size left as it
    is (Linux ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``): the readers
    following a fill take the file's size for how far it is written. The
    copy's writes then fill blocks already allocated instead of allocating
    them page by page (a third less CPU per byte written, measured on ext4),
    and a disk without room says so before the download. Nothing where the
    system or the file system cannot (a disk that is full still raises)."""
    if size <= 0 or not sys.platform.startswith("linux"):
        return
    if not _fallocate:
        try:
            import ctypes

            call = ctypes.CDLL(None, use_errno=True).fallocate
            call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            call.restype = ctypes.c_int
        except (OSError, AttributeError):
            call = None
        _fallocate.append(call)
    call = _fallocate[0]
    if call is None or call(fd, _FALLOC_FL_KEEP_SIZE, 0, size) == 0:
        return
    import ctypes

    error = ctypes.get_errno()
    if error in (errno.ENOSPC, errno.EDQUOT):
        raise OSError(error, os.strerror(error))


def _give_up(fd: int, temp: str) -> None:
    """End a fill that keeps no copy: cut its file first (readers of the part
    written stop there), then remove it and let go of the flock."""
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    _discard(temp)
    os.close(fd)


def _unwritable(folder: str, e: OSError) -> bool:
    """False (read from the bucket) for a cache disk that cannot be written; ``e`` is raised otherwise."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        _warn_once(folder, f"shard cache {folder}: cannot write ({e.strerror}); reading from the bucket")
        return False
    raise e


def _download(url: str, fd: int, size: int, storage_options: dict | None,
              cancel: threading.Event | None = None, checked: Pending[None] | None = None,
              check: _AnswerCheck | None = None, budget: ReadBudget = DEFAULT) -> None:
    """Write ``url``'s ``size`` bytes into ``fd`` by concurrent range reads,
    the ranges not started when ``cancel`` is set left out; from a server
    that ignores ``Range``, by one streamed GET. Nothing is written before
    ``checked`` (the object's change check) has its result; its error is raised.
    ``check``: called with each range's answer (where the file system gives
    them, :func:`~tfrecord_torch.io.files.answers_checked`) before its bytes
    are written."""
    try:
        _download_ranges(url, fd, size, storage_options, cancel, checked, check, budget)
    except http.RangesIgnored:  # every range request would bring the whole object (HTTP: never listed)
        _download_stream(url, fd, size, storage_options, cancel, checked, budget.fill.chunk)


def _download_stream(url: str, fd: int, size: int, storage_options: dict | None,
                     cancel: threading.Event | None, checked: Pending[None] | None, chunk: int) -> None:
    """Write ``url``'s ``size`` bytes into ``fd`` from one streamed GET, ``chunk`` bytes at a time."""
    f = fs.RemoteFile(url, storage_options, 0, size)  # a dropped connection resumes where it stood
    try:
        at = 0
        while at < size and not (cancel is not None and cancel.is_set()):
            data = f.read(min(chunk, size - at))
            if not data:
                raise RemoteError(url, f"the object ended after {at} bytes, not the {size} bytes listed "
                                       "(changed or truncated); list the dataset again")
            if checked is not None:
                checked.result()
            os.pwrite(fd, data, at)
            at += len(data)
    finally:
        f.close()


def _ranges_of(size: int, budget: ReadBudget = DEFAULT) -> list[tuple[int, int]]:
    """The [start, end) ranges a download of ``size`` bytes requests, in order:
    as ``budget`` ramps (its first bytes, each next twice the one before) while
    below ``budget.fill.chunk`` (a reader following the fill has the first
    records after a small range, not after a long one), then the rest in
    ranges of ``budget.fill.longest`` bytes, or, where that would leave fewer
    than :data:`PARALLEL` requests in flight, in that many equal ranges (of
    ``budget.fill.chunk`` bytes at least, unless the rest is shorter): each
    request costs about as much CPU whatever its length."""
    chunk = budget.fill.chunk
    ranges, start = [], 0
    for step in budget.ramp(chunk):
        if start >= size or step >= chunk:
            break
        end = min(start + step, size)
        ranges.append((start, end))
        start = end
    rest = size - start
    longest = max(budget.fill.longest, chunk)
    step = longest if rest >= PARALLEL * longest else -(-rest // min(PARALLEL, max(rest // chunk, 1)))
    while start < size:
        end = min(start + step, size)
        ranges.append((start, end))
        start = end
    return ranges


def _download_ranges(url: str, fd: int, size: int, storage_options: dict | None,
                     cancel: threading.Event | None, checked: Pending[None] | None = None,
                     check: _AnswerCheck | None = None, budget: ReadBudget = DEFAULT) -> None:
    """The ranges (:func:`_ranges_of`) are fetched :data:`PARALLEL` at
    once, their bytes written in order by this thread as they arrive
    (:class:`_InOrder`: the file's size is then how far it is written), at
    most ``2 * PARALLEL`` ranges and ``budget.fill.ahead`` bytes (or the one
    range) asked for from the first one not yet complete on: the pieces held
    in memory, waiting for their turn to be written, are fewer bytes.

    Not the library's producer loop (:class:`~tfrecord_torch._threads.Producer`,
    one thread running a source ahead of its consumer): a fill has
    :data:`PARALLEL` requests in flight at once, whose pieces arrive out of
    order and are written in order by the thread that waits for them; its
    pool is joined here (``with``) before the fill returns."""
    ends = dict(_ranges_of(size, budget))
    starts = list(ends)
    ahead = budget.fill.ahead
    writer = _InOrder(fd, checked, cancel, budget.fill.write_batch)

    def fetch(start: int) -> None:
        if cancel is not None and cancel.is_set():
            return
        end = ends[start]
        reached = fs.stream_range(url, start, end, writer.put, storage_options, cancel, check)  # retried inside
        if reached != end and not (cancel is not None and cancel.is_set()):
            raise RemoteError(url, f"bytes {start}-{end} came back as {reached - start} bytes: the object is "
                                   f"shorter than the {size} bytes listed (changed or truncated); list the "
                                   "dataset again")

    if len(starts) <= 1:
        for start in starts:
            fetch(start)
        writer.write(None)
        return
    with OwnedPool(min(PARALLEL, len(starts)), "tfrecord-shard-copy") as pool:
        pending = collections.deque(starts)
        flying: collections.deque[tuple[int, Future]] = collections.deque()
        asked = 0  # bytes of the ranges in ``flying``
        try:
            while pending or flying:
                while pending and (not flying or (len(flying) < 2 * PARALLEL and
                                                  asked + ends[pending[0]] - pending[0] <= ahead)):
                    start = pending.popleft()
                    flying.append((start, writer.watch(pool.submit(fetch, start))))
                    asked += ends[start] - start
                start, future = flying[0]
                writer.write(future)
                future.result()
                flying.popleft()
                asked -= ends[start] - start
                if cancel is not None and cancel.is_set():
                    return
        finally:
            for _, future in flying:  # no more requests once one has failed or the copy is given up
                future.cancel()
    writer.write(None)


class _InOrder:
    """A download's pieces written into its fill file in the order of their
    offsets, each once every byte before it is written (the file's size is
    then how far the copy is written, for the readers following it), and
    none before the object's change check (``checked``) has passed.

    :meth:`put` (from any thread: a piece may come from the event loop
    that streams it) only keeps the piece; :meth:`write`, on the thread
    that runs the download, writes them: a disk that holds up writes never
    holds up the event loop, and the pieces are written soon after they
    arrive (``batch`` bytes at a time: the fill budget's ``write_batch``),
    while still in the CPU's cache."""

    def __init__(self, fd: int, checked: Pending[None] | None, cancel: threading.Event | None = None,
                 batch: int = DEFAULT.fill.write_batch) -> None:
        self.fd, self.checked, self.cancel, self.batch = fd, checked, cancel, batch
        self.written = 0
        self._early: dict[int, bytes] = {}  # offset -> a piece not written yet
        self._edge = 0  # where the bytes there to write in order (written or not) end
        self._cond = threading.Condition()

    def put(self, offset: int, data: bytes) -> None:
        with self._cond:
            self._early[offset] = data
            if offset == self._edge:
                while self._edge in self._early:
                    self._edge += len(self._early[self._edge])
                if self._edge - self.written >= self.batch:  # one wake-up per batch, not per piece
                    self._cond.notify()

    def watch(self, future: Future) -> Future:
        """``future`` (a range being fetched), waking :meth:`write` when it ends."""
        future.add_done_callback(lambda _: self._wake())
        return future

    def write(self, until: Future | None) -> None:
        """Write the pieces as their turn comes, until ``until`` (a range
        being fetched) has ended; None: the pieces already there. The change
        check is waited for first (its error is raised). Nothing is written
        once ``cancel`` is set: a copy given up stays short, so its fill
        ends as given up, whatever pieces had already arrived."""
        if self.checked is not None:
            self.checked.result()
        while True:
            with self._cond:
                while self._edge - self.written < self.batch and until is not None and not until.done():
                    self._cond.wait()
                if self.cancel is not None and self.cancel.is_set():  # given up: nothing more is written
                    return
                pieces = []
                at = self.written
                while at in self._early:
                    pieces.append(self._early.pop(at))
                    at += len(pieces[-1])
            if not pieces:
                return
            for data in pieces:
                view = memoryview(data)
                while view:
                    n = os.pwrite(self.fd, view, self.written)
                    view = view[n:]
                    with self._cond:
                        self.written += n

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()


class _AnswerCheck:
    """A check of each range's answer: one that names another ETag or size
    than the listed object's raises :class:`RemoteError` (no byte of it is
    written). An answer that names no ETag (a server that leaves it out of
    its GET answers) is not taken for a change: ``unnamed`` is then set, and
    the object is asked for its version once the download is done."""

    def __init__(self, url: str, size: int, version: str) -> None:
        self.url, self.size, self.version = url, size, version
        self.unnamed = False

    def __call__(self, answer: Answer) -> None:
        same_size = answer.size in (None, self.size)
        if same_size and answer.etag is None:
            self.unnamed = True
        elif not same_size or answer.etag != self.version:
            listed, now = (self.size, self.version), (answer.size, answer.etag)
            raise RemoteError(self.url, fs.changed_object(listed, now, "since it was listed", seen="a range of it now"))


class _CheckSoon(Pending[None]):
    """:func:`_check_unchanged` on a thread of its own, started now;
    :meth:`result` joins the thread and raises its error (every way
    :func:`_fill` ends asks for it, so the thread never outlives the fill)."""

    def __init__(self, url: str, size: int, version: str, storage_options: dict | None, when: str) -> None:
        self._pool = OwnedPool(1, "tfrecord_torch-copy-check")
        self._future = self._pool.submit(_check_unchanged, url, size, version, storage_options, when)

    def result(self) -> None:
        try:
            self._future.result()
        finally:
            self._pool.close()


def _check_unchanged(url: str, size: int, version: str, storage_options: dict | None, when: str) -> None:
    now = fs.fresh_size_and_version(url, storage_options)
    if now != (size, version):
        raise RemoteError(url, fs.changed_object((size, version), now, when))


def _discard(temp: str) -> None:
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("%s", message)


def _log_once(level: int, message: str) -> None:
    """Log ``message`` the first time this process meets it (a dataset made
    again each epoch says it once)."""
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    log.log(level, "%s", message)


def shard_cache_usage(cache: ShardCache | None = None) -> tuple[int, int]:
    """The shard cache's number of copies and their bytes."""
    return LruFolder((cache or ShardCache()).folder, SUFFIX).usage()


def clear_shard_cache(cache: ShardCache | None = None) -> int:
    """Remove every copy (do not call while a job fills the cache); returns how many."""
    return LruFolder((cache or ShardCache()).folder, SUFFIX).clear()
