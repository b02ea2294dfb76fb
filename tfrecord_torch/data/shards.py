"""Finding shards and their indexes for the datasets.

Opening remote shards costs few round trips: the shards are listed once (a glob, a
folder, or the folders of explicit URLs), which gives every object's size and version and
often tells whether an index object sits beside a shard; then each shard's facts (its
index, or a 12-byte header sniff when it has none) are fetched for all shards at once on
a bounded thread pool. With index files that is one request per shard.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tfrecord_torch.errors import IndexMismatchError, TFRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import listing as lister
from tfrecord_torch.records.compression import check_compression, detect_compression, is_compressed
from tfrecord_torch.records.index import (
    check_index,
    default_index_path,
    load_index,
    parse_index,
    scan_index,
    write_index,
)
from tfrecord_torch.records.stamp import stamp_matches, write_stamp

__all__ = ["OPEN_THREADS", "describe_shards", "expand_paths", "find_shards", "index_cache_dir", "shard_index",
           "shard_indexes"]

OPEN_THREADS = 16  # remote shards opened at once

log = logging.getLogger(__name__)
_SKIP_SUFFIXES = (".index", ".idx", ".json", ".txt", ".partial")


def expand_paths(paths, storage_options: dict | None = None) -> list[str]:
    """Shard paths from a path, a glob pattern, a directory, or a list of these;
    local or fsspec URLs (``s3://bucket/prefix/*.tfrecord``, ``gs://bucket/dir``).

    A directory gives the files directly inside it, sorted, minus index and
    metadata files (``.index``, ``.idx``, ``.json``, ``.txt``) and hidden files.
    """
    return find_shards(paths, storage_options).files


def find_shards(paths, storage_options: dict | None = None) -> lister.Listing:
    """Like :func:`expand_paths`, with what the listing learned: each remote shard's size
    and version, and which index objects exist (for :func:`shard_indexes`)."""
    return lister.list_files(paths, storage_options, _SKIP_SUFFIXES)


def describe_shards(paths: list[str]) -> str:
    """A short description of a shard list for a repr: ``'3 shards: a-0, a-1, a-2'``."""
    names = [os.path.basename(p.rstrip("/")) or p for p in paths]
    shown = names if len(names) <= 3 else [names[0], "...", names[-1]]
    folders = {os.path.dirname(p) for p in paths}
    where = f" in {folders.pop()}" if len(folders) == 1 else ""
    return f"{len(paths)} shard{'s' if len(paths) != 1 else ''}{where}: {', '.join(shown)}"


def index_cache_dir() -> str:
    """Where indexes go when a shard's folder is read-only:
    ``$TFRECORD_TORCH_CACHE`` or ``~/.cache/tfrecord_torch/index``."""
    return os.environ.get("TFRECORD_TORCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfrecord_torch", "index")


def _cached_index_path(path: str, storage_options: dict | None, stat: tuple[int, str] | None = None) -> str:
    size, version = fs.size_and_version(path, storage_options) if stat is None else stat
    key = f"{path if fs.is_url(path) else os.path.abspath(path)}\0{size}\0{version}".encode()
    name = os.path.basename(path.rstrip("/"))[:60]
    return os.path.join(index_cache_dir(), f"{name}.{hashlib.sha256(key).hexdigest()[:20]}.index")


def shard_index(path: str, index_path: str | None = None, *, build: bool = True,
                storage_options: dict | None = None, report=None, progress=None) -> np.ndarray:
    """The checked index of an uncompressed shard.

    Uses ``index_path`` if given (it must match: a mismatch is an error), else
    ``<path>.index`` or a cached index, rebuilding either when it does not match
    the shard. New indexes are written beside a local shard, or in the cache
    folder when its folder is read-only or the shard is remote. The cache key
    includes the file's size and modification time (an object's ETag), so an
    index of a changed file is never reused.

    With ``report`` (an ``on_error`` policy's reporter) a corrupt shard is
    indexed as far as it can be (see :func:`scan_index`); an index that stops
    short of the end of the file is used but never saved. ``progress`` is
    called with the bytes read while a shard is scanned.
    """
    so = storage_options
    if index_path is not None:
        index = load_index(index_path, storage_options=so)
        check_index(index, path, index_path=index_path, storage_options=so)
        return index
    cached = _cached_index_path(path, so)
    candidates = [default_index_path(path), cached]
    for candidate in candidates:
        if fs.exists(candidate, so if candidate != cached else None):
            try:
                index = load_index(candidate, storage_options=so if candidate != cached else None)
                check_index(index, path, index_path=candidate, storage_options=so)
            except IndexMismatchError as e:
                log.warning("rebuilding a stale index: %s", e)
                continue
            if candidate == cached or stamp_matches(path, candidate, len(index)):
                return index
            # No stamp (another tool's index) or the shard changed since: check it in full, once.
            # A shard damaged since it was indexed keeps its index (the reader reports the damage).
            damage: list = []
            fresh = scan_index(path, so, progress=progress, report=damage.append)
            if damage:
                return index
            if np.array_equal(fresh, index):
                write_stamp(path, candidate, len(index))
                return index
            log.warning("rebuilding a stale index: %s does not describe %s as it is now", candidate, path)
            index = fresh
            break
    else:
        if not build:
            raise TFRecordError(f"{path}: no index (build one with `tfrecord-torch index`)")
        index = scan_index(path, so, progress=progress, report=report)
    end = int(index[-1].sum()) if len(index) else 0
    if end != fs.size_and_version(path, so)[0]:
        return index  # cut short by a bad length: kept for this run only
    for candidate in ([cached] if fs.is_url(path) else candidates):
        try:
            os.makedirs(os.path.dirname(candidate), exist_ok=True)
            write_index(index, candidate)
            if candidate != cached:
                write_stamp(path, candidate, len(index))
            log.info("built index %s", candidate)
            break
        except OSError as e:
            log.debug("cannot write index %s: %s", candidate, e)
    return index


def shard_indexes(listing: lister.Listing, *, compression="auto", index: list | None = None, build: bool = True,
                  storage_options: dict | None = None, report=None,
                  progress: bool | None = None) -> list[np.ndarray | None]:
    """Each shard's checked index, or None for a compressed shard (streamed, not indexed).

    ``index``: one index path per shard (used as given, see :func:`shard_index`). Remote
    shards are opened concurrently (:data:`OPEN_THREADS` at a time), each from what
    ``listing`` knows plus, when it has an index object, one request for it. A remote
    index is checked against the shard's listed size (its records must tile the object);
    the record headers are checked as the records are read, so an index of another object
    is reported then, as a corrupt record naming the file and offset.

    ``progress``: a progress bar over the bytes read while shards are indexed,
    on stderr, shown once a shard needs indexing: True, False, or None (when
    stderr is a terminal, outside DataLoader workers).
    """
    so = storage_options
    paths = listing.files
    bar = IndexingBar(len(paths), progress)

    def one(i: int) -> np.ndarray | None:
        path = paths[i]
        if index is not None:
            return shard_index(path, os.fspath(index[i]), build=build, storage_options=so)
        if fs.is_url(path):
            return _remote_index(path, listing, compression, build, so, report, bar)
        if is_compressed(path, compression, so):
            return None
        return shard_index(path, build=build, storage_options=so, report=report, progress=bar)

    try:
        if len(paths) < 2 or not any(fs.is_url(p) for p in paths):
            return [one(i) for i in range(len(paths))]
        if report is not None:  # the policy's counts are read-modify-writes: one thread at a time
            report = _serialized(report)
        with ThreadPoolExecutor(min(OPEN_THREADS, len(paths)), thread_name_prefix="open-shards") as pool:
            return list(pool.map(one, range(len(paths))))
    finally:
        bar.close()


class IndexingBar:
    """A tqdm bar over the bytes scanned to index shards, started at the first
    byte (opening shards that have indexes shows nothing); thread-safe."""

    def __init__(self, shards: int, enabled: bool | None) -> None:
        if enabled is None:
            enabled = sys.stderr is not None and sys.stderr.isatty() and not _in_worker()
        self.shards, self.enabled = shards, enabled
        self._bar: Any = None
        self._lock = threading.Lock()

    def __call__(self, count: int) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(unit="B", unit_scale=True, file=sys.stderr, leave=False,
                                 desc=f"indexing {self.shards} shard{'s' if self.shards != 1 else ''}")
            self._bar.update(count)

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def _in_worker() -> bool:
    """Inside a DataLoader worker (torch already imported there)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _serialized(call):
    lock = threading.Lock()

    def serialized(error: Exception) -> None:
        with lock:
            call(error)
    return serialized


def _remote_index(path: str, listing: lister.Listing, compression, build: bool,
                  so: dict | None, report=None, progress=None) -> np.ndarray | None:
    """A remote shard's index: the index object beside it (one request), or a cached one
    (none), or after a 12-byte sniff (one) a scan of the shard; None if compressed."""
    compression = check_compression(compression, allow_auto=True)
    if compression not in ("auto", None):
        return None
    stat = listing.stats.get(path) or fs.size_and_version(path, so)
    if stat[0] == 0:  # an empty object holds no records (and has no bytes to sniff)
        return np.zeros((0, 2), np.int64)
    fs.require_ranges(path, so, stat[0])  # records are read by range: say so now if they cannot be
    beside = default_index_path(path)
    if listing.knows(beside) is not False:
        known = listing.stats.get(beside)
        try:  # one request when the listing saw it, two when it could not tell
            text = fs.read_bytes(beside, so, size=None if known is None else known[0])
        except FileNotFoundError:
            text = None
        if text is not None:
            try:
                index = parse_index(text, beside)
                check_index(index, path, index_path=beside, size=stat[0], samples=0)
                return index
            except IndexMismatchError as e:
                log.warning("rebuilding a stale index: %s", e)
    cached = _cached_index_path(path, so, stat)
    if os.path.exists(cached):
        try:
            index = load_index(cached)
            check_index(index, path, index_path=cached, size=stat[0], samples=0)
            return index
        except IndexMismatchError as e:
            log.warning("rebuilding a stale index: %s", e)
    if compression == "auto" and detect_compression(fs.read_range(path, 0, min(12, stat[0]), so), path) is not None:
        return None
    if not build:
        raise TFRecordError(f"{path}: no index (build one with `tfrecord-torch index`)")
    index = scan_index(path, so, progress=progress, report=report)
    if (int(index[-1].sum()) if len(index) else 0) != stat[0]:
        return index  # cut short by a bad length: kept for this run only
    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        write_index(index, cached)
        log.info("built index %s", cached)
    except OSError as e:
        log.debug("cannot write index %s: %s", cached, e)
    return index
