"""Which index describes a shard: found, checked, built and kept, without writing into
the folder of data the library only reads.

A shard's index is looked for, in order:

1. an index path the caller gives (checked; a mismatch is an error);
2. an index file the shard's writer left: ``<folder>/index/<shard>.index`` (what
   :func:`~tfrecord_torch.write_dataset` writes) or ``<shard>.index`` beside it (DALI's
   ``tfrecord2idx``, the ``tfrecord`` package, ``tfrecord-torch index``). With a stamp
   that matches the shard as it is now (:mod:`~tfrecord_torch.records.stamp`) it is used
   as is; without one it is checked once against a scan of the shard;
3. the local index cache (:func:`index_cache_dir`), keyed by the shard's identity: its
   path, size, modification and change times and inode (an object's ETag), so a changed
   file is never served the index of its former self;
4. a scan of the shard, whose index goes into the cache -- or beside the shard, as
   ``<shard>.index``, when the caller asks (``save="beside"``).

Reading never creates a file in the shard's folder unless asked. Cache entries are
written atomically (a temporary name, then a rename), so DataLoader workers and ranks on
one machine can share them; the cache is kept under :func:`cache_limit` bytes by
dropping the least recently used entries.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np

from tfrecord_torch.errors import IndexMismatchError, TFRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import listing as lister
from tfrecord_torch.io.lru import LruFolder
from tfrecord_torch.records.compression import check_compression, detect_compression
from tfrecord_torch.records.index import (
    check_index,
    default_index_path,
    load_index,
    parse_index,
    scan_index,
    write_index,
    writer_index_path,
)
from tfrecord_torch.records.stamp import local_identity, stamp_matches, write_stamp

if TYPE_CHECKING:
    from tfrecord_torch.io.copies import ShardCopies

__all__ = ["SaveIndex", "cache_limit", "cache_remote_index", "cache_usage", "cached_remote_index",
           "clear_index_cache", "index_cache_dir", "index_candidates", "remote_shard_index", "shard_index"]

log = logging.getLogger(__name__)

SaveIndex = Literal["cache", "beside"]
_DEFAULT_LIMIT = 1 << 30


def index_candidates(path: str) -> list[str]:
    """The index files a shard's writer may have left, in the order they are tried."""
    return [writer_index_path(path), default_index_path(path)]


def index_cache_dir() -> str:
    """The local index cache: ``$TFRECORD_TORCH_CACHE`` or ``~/.cache/tfrecord_torch/index``.
    Safe to delete at any time (``tfrecord-torch index --clear-cache``)."""
    return os.environ.get("TFRECORD_TORCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfrecord_torch", "index")


def cache_limit() -> int:
    """The cache's size bound in bytes: ``$TFRECORD_TORCH_CACHE_LIMIT`` or 1 GiB."""
    text = os.environ.get("TFRECORD_TORCH_CACHE_LIMIT")
    if not text:
        return _DEFAULT_LIMIT
    try:
        return max(0, int(text))
    except ValueError:
        raise ValueError(f"TFRECORD_TORCH_CACHE_LIMIT must be a number of bytes, not {text!r}") from None


def clear_index_cache() -> int:
    """Remove every cached index; returns how many were removed."""
    return _cache().clear()


def _cache() -> LruFolder:
    return LruFolder(index_cache_dir(), ".index")


def _cache_path(path: str, identity: str) -> str:
    location = path if fs.is_url(path) else os.path.abspath(fs.local(path))
    key = f"{location}\0{identity}".encode("utf-8", "surrogateescape")
    name = os.path.basename(path.rstrip("/"))[:60]
    return os.path.join(index_cache_dir(), f"{name}.{hashlib.sha256(key).hexdigest()[:24]}.index")


def _cache_get(cached: str, path: str, size: int | None = None) -> np.ndarray | None:
    try:
        index = load_index(cached)
        check_index(index, path, index_path=cached, size=size, samples=0)
    except OSError:  # none there, or a cache folder that cannot be read (a path through a file): built again
        return None
    except IndexMismatchError as e:  # a damaged entry: built again
        log.warning("ignoring a damaged cached index: %s", e)
        return None
    LruFolder.touch(cached)  # least recently used entries go first when the cache is full
    return index


def _cache_put(cached: str, index: np.ndarray) -> None:
    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        write_index(index, cached)
        log.info("cached index %s", cached)
    except OSError as e:
        log.debug("cannot cache index %s: %s", cached, e)
        return
    LruFolder(os.path.dirname(cached), ".index").prune(cache_limit(), keep=cached)


def cached_remote_index(path: str, stat: tuple[int, str]) -> np.ndarray | None:
    """The index the local cache holds for the remote object ``path`` as listed
    (``stat``: its size and version), or None; asks the store nothing."""
    return _cache_get(_cache_path(path, f"{stat[0]}\0{stat[1]}"), path, stat[0])


def cache_remote_index(path: str, stat: tuple[int, str], index: np.ndarray) -> bool:
    """Keep ``index``, built from the remote object ``path`` as listed
    (``stat``), in the local index cache (never beside the shard); False,
    keeping nothing, unless its records tile the object exactly."""
    if not len(index) or index[0, 0] != 0 or int(index[-1].sum()) != stat[0] \
            or np.any(index[1:, 0] != index[:-1].sum(axis=1)):
        return False
    _cache_put(_cache_path(path, f"{stat[0]}\0{stat[1]}"), index)
    return True


def cache_usage() -> tuple[int, int]:
    """The index cache's number of entries and their bytes."""
    return _cache().usage()


def shard_index(path: str, index_path: str | None = None, *, build: bool = True, save: SaveIndex = "cache",
                storage_options: dict | None = None, report=None,
                progress: Callable[[int], object] | None = None) -> np.ndarray:
    """The checked index of an uncompressed local (or remote) shard; see the module's docstring.

    Args:
        path: the shard.
        index_path: an index file to use; it must match the shard (a mismatch is an error).
        build: scan the shard when no index is found (else :class:`TFRecordError`).
        save: where a newly built index goes: ``"cache"`` (the local index cache) or
            ``"beside"`` (``<shard>.index`` and its stamp, written into the shard's folder).
        report: an ``on_error`` policy's reporter: a corrupt shard is indexed as far as it
            can be (see :func:`scan_index`); an index that stops short of the end of the
            file is used but never saved.
        progress: called with the bytes read while the shard is scanned.
    """
    if save not in ("cache", "beside"):
        raise ValueError(f"save must be 'cache' or 'beside', not {save!r}")
    if index_path is not None:
        index = load_index(index_path, storage_options=storage_options)
        check_index(index, path, index_path=index_path, storage_options=storage_options)
        return index
    if fs.is_url(path):
        # asked for by itself, the shard is stat'ed afresh: a listing of its folder that the
        # process's filesystem object kept would give a rewritten shard's former size and version
        lister.forget_listings(*fs.filesystem(path, storage_options))
        listing = lister.Listing([path], {}, frozenset())
        found = remote_shard_index(path, listing, "auto", build, storage_options, report, progress)
        if found is None:
            raise TFRecordError(f"{path}: a compressed file cannot be indexed")
        return found
    identity = local_identity(path)
    cached = _cache_path(path, identity)
    unchecked: list[tuple[str, np.ndarray]] = []
    for candidate in index_candidates(path):
        if not os.path.exists(candidate):
            continue
        try:
            index = load_index(candidate)
            check_index(index, path, index_path=candidate)
        except IndexMismatchError as e:
            log.warning("not using a stale index: %s", e)
            continue
        if stamp_matches(path, candidate, len(index)):
            return index
        unchecked.append((candidate, index))
    hit = _cache_get(cached, path)
    if hit is not None:
        if save == "beside":  # asked for beside the shard: a cached one is copied there
            _write_beside(path, hit)
        return hit
    if unchecked:
        # No stamp (another tool's index) or the shard changed since: checked in full, once.
        damage: list = []
        fresh = scan_index(path, storage_options, progress=progress, report=damage.append)
        if damage:  # a shard damaged since it was indexed keeps its index: the reader reports the damage
            return unchecked[0][1]
        for candidate, index in unchecked:
            if np.array_equal(fresh, index):
                if save == "beside" and candidate == default_index_path(path):
                    write_stamp(path, candidate, len(index))
                else:
                    _cache_put(cached, index)
                return index
            log.warning("not using a stale index: %s does not describe %s as it is now", candidate, path)
        index = fresh
    elif not build:
        raise TFRecordError(f"{path}: no index (build one with `tfrecord-torch index`)")
    else:
        index = scan_index(path, storage_options, progress=progress, report=report)
    if (int(index[-1].sum()) if len(index) else 0) != os.path.getsize(fs.local(path)):
        return index  # cut short by a bad length: kept for this run only
    if save == "beside":
        _write_beside(path, index)
    else:
        _cache_put(cached, index)
    return index


def _write_beside(path: str, index: np.ndarray) -> None:
    beside = default_index_path(path)
    write_index(index, beside)
    write_stamp(path, beside, len(index))
    log.info("wrote index %s", beside)


def remote_shard_index(path: str, listing: lister.Listing, compression, build: bool,
                       storage_options: dict | None, report=None, progress=None,
                       copies: ShardCopies | None = None) -> np.ndarray | None:
    """A remote shard's index: an index object its writer left (one request each, none
    when the listing shows there is none), or a cached one (none), or after a 12-byte
    sniff (one) a scan of the shard; None if the shard is compressed. With ``copies``
    (the shard cache) the scan reads the shard's local copy, made for it: the one
    download serves the index and the records read later."""
    compression = check_compression(compression, allow_auto=True)
    if compression not in ("auto", None):
        return None
    stat = listing.stats.get(path) or fs.size_and_version(path, storage_options)
    if stat[0] == 0:  # an empty object holds no records (and has no bytes to sniff)
        return np.zeros((0, 2), np.int64)
    # records are read by range: say so now if they cannot be
    fs.require_ranges(path, storage_options, stat[0])
    for candidate in index_candidates(path):
        if listing.knows(candidate) is False:
            continue
        known = listing.stats.get(candidate)
        try:  # one request when the listing saw it, two when it could not tell
            text = fs.read_bytes(candidate, storage_options, size=None if known is None else known[0])
        except FileNotFoundError:
            continue
        try:
            index = parse_index(text, candidate)
            check_index(index, path, index_path=candidate, size=stat[0], samples=0)
            return index
        except IndexMismatchError as e:
            log.warning("not using a stale index: %s", e)
    cached = _cache_path(path, f"{stat[0]}\0{stat[1]}")
    hit = _cache_get(cached, path, stat[0])
    if hit is not None:
        return hit
    if compression == "auto":
        head = fs.read_range(path, 0, min(12, stat[0]), storage_options)
        if detect_compression(head, path) is not None:
            return None
    if not build:
        raise TFRecordError(f"{path}: no index (build one with `tfrecord-torch index`)")
    copy = copies.open_file(path, fill=True) if copies is not None and copies.covers(path) else None
    if copy is None:
        index = scan_index(path, storage_options, progress=progress, report=report)
    else:
        with copy:
            index = scan_index(copy, progress=progress, report=report)
    if (int(index[-1].sum()) if len(index) else 0) != stat[0]:
        return index  # cut short by a bad length: kept for this run only
    _cache_put(cached, index)
    return index
