"""Finding shards and their indexes for the datasets.

Opening remote shards costs few round trips: the shards are listed once (a glob, a
folder, or the folders of explicit URLs), which gives every object's size and version and
often tells whether an index object sits beside a shard; then each shard's facts (its
index, or a 12-byte header sniff when it has none) are fetched for all shards at once on
a bounded thread pool. With index files that is one request per shard.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import listing as lister
from tfrecord_torch.io.files import S3_CONNECTIONS
from tfrecord_torch.records.compression import is_compressed
from tfrecord_torch.records.shardindex import SaveIndex, index_cache_dir, remote_shard_index, shard_index

if TYPE_CHECKING:
    from tfrecord_torch.data.firstepoch import FirstEpoch
    from tfrecord_torch.io.copies import ShardCopies

__all__ = ["OPEN_THREADS", "LazyIndexes", "check_lengths", "check_lengths_found", "describe_shards", "expand_paths", "find_shards",
           "index_argument", "index_cache_dir", "shard_index", "shard_indexes"]

OPEN_THREADS = S3_CONNECTIONS  # remote shards opened at once: as many as an S3 filesystem's connections

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


def index_argument(index, shards: int) -> tuple[list | None, SaveIndex]:
    """A dataset's ``index=`` argument (None, "beside" or one index path per shard) as
    the index paths to use and where indexes built for the others go."""
    if index is None:
        return None, "cache"
    if isinstance(index, str):
        if index != "beside":
            raise ValueError(f"index must be None, 'beside', False or a list of {shards} index paths, "
                             f"not {index!r} (for one shard, pass [{index!r}])")
        return None, "beside"
    if isinstance(index, bool):
        raise ValueError(f"index must be None, 'beside', False or a list of {shards} index paths, not {index!r}")
    index = list(index)
    if len(index) != shards:
        raise ValueError(f"index: got {len(index)} index files for {shards} shards")
    return index, "cache"


def shard_indexes(listing: lister.Listing, *, compression="auto", index: list | None = None, build: bool = True,
                  save: SaveIndex = "cache", storage_options: dict | None = None, report=None,
                  progress: bool | None = None, copies: ShardCopies | None = None) -> list[np.ndarray | None]:
    """Each shard's checked index, or None for a compressed shard (streamed, not indexed).

    ``index``: one index path per shard (used as given, see :func:`shard_index`).
    ``save``: where indexes built here go, ``"cache"`` or ``"beside"`` the shards. Remote
    shards are opened concurrently (:data:`OPEN_THREADS` at a time), each from what
    ``listing`` knows plus, when it has an index object, one request for it. A remote
    index is checked against the shard's listed size (its records must tile the object);
    the record headers are checked as the records are read, so an index of another object
    is reported then, as a corrupt record naming the file and offset.

    ``copies``: the shard cache's copies of the remote shards, or None; a remote
    shard that must be scanned is scanned from its copy (made for it).

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
            return remote_shard_index(path, listing, compression, build, so, report, bar, copies)
        if is_compressed(path, compression, so):
            return None
        return shard_index(path, build=build, save=save, storage_options=so, report=report, progress=bar)

    try:
        if len(paths) < 2 or not any(fs.is_url(p) for p in paths):
            return [one(i) for i in range(len(paths))]
        if report is not None:  # the policy's counts are read-modify-writes: one thread at a time
            report = _serialized(report)
        with OwnedPool(min(OPEN_THREADS, len(paths)), "open-shards") as pool:
            return list(pool.map(one, range(len(paths))))
    finally:
        bar.close()


def check_lengths(lengths, paths: list[str]) -> list[int] | None:
    """``lengths=`` (one record count per shard) checked against the shards."""
    if lengths is None:
        return None
    if len(lengths) != len(paths):
        raise ValueError(f"lengths: got {len(lengths)} record counts for {len(paths)} shards "
                         "(one count >= 0 per shard)")
    return list(lengths)


class LazyIndexes:
    """A dataset's shard indexes, built once, when first needed (with
    ``lengths=``, when something first needs the offsets, not before), by
    one thread while others wait. Pickles without its lock (spawned
    DataLoader workers), with the indexes if they were built.

    Args:
        listing: the shard listing (:func:`find_shards`).
        index: ``Source.index`` (False: every shard streamed).
        lengths: ``lengths=`` (checked: :func:`check_lengths`), or None.
        first: the remote shards left unindexed until epoch 0 has streamed
            them (:class:`~tfrecord_torch.data.firstepoch.FirstEpoch`); None: none.
    """

    def __init__(self, listing: lister.Listing, index: Any, lengths: list[int] | None,
                 first: FirstEpoch | None = None) -> None:
        self.listing, self.index, self.lengths = listing, index, lengths
        self.first = first
        self.built: list | None = None
        self._lock = threading.Lock()

    @property
    def off(self) -> bool:
        """``Source(index=False)``: every shard is streamed."""
        return self.index is False

    def get(self, build: Callable[[lister.Listing, list | None, SaveIndex], list], epoch: int = 0) -> list:
        """Each shard's index in ``epoch`` (None: streamed); the first call has
        them built by ``build(listing, index paths, save)`` (see
        :func:`shard_indexes`). Shards :attr:`first` defers are None in epoch
        0, and from epoch 1 on indexed from the cache epoch 0 filled (or by
        ``build``, for those it lacks)."""
        if self.built is None:
            with self._lock:
                if self.built is None:
                    self.built = self._build(build)
        if self.first is None or not self.first.deferred:
            return self.built
        with self._lock:
            return self.first.indexes_for(epoch, self.built, lambda listing: build(listing, None, "cache"))

    def counts(self, build: Callable[[lister.Listing, list | None, SaveIndex], list], epoch: int) -> list[int] | None:
        """Records per shard in ``epoch`` (None if some shard is streamed
        then); from ``lengths=`` while the shards are not yet indexed."""
        if self.lengths is not None and self.built is None:
            return list(self.lengths)
        indexes = self.get(build, epoch)
        return None if any(i is None for i in indexes) else [len(i) for i in indexes]

    def unknown_length(self, build: Callable[[lister.Listing, list | None, SaveIndex], list], epoch: int) -> str:
        """Why ``len()`` is unknown in ``epoch`` (some shards are streamed)."""
        from tfrecord_torch.data.usage import unknown_length  # the CLI's light commands import this module

        if self.first is not None and self.first.streams(epoch):
            return self.first.unknown_length()
        return unknown_length(self.listing.files, self.get(build, epoch), self.off)

    def streams_deferred(self, epoch: int) -> bool:
        """Whether ``epoch`` streams shards :attr:`first` deferred (epoch 0 of
        remote shards without index objects)."""
        return self.first is not None and self.first.streams(epoch)

    def enter(self, build: Callable[[lister.Listing, list | None, SaveIndex], list], epoch: int) -> None:
        """Ready ``epoch``'s indexes now if :attr:`first` deferred shards (a
        later epoch indexes those epoch 0 streamed); otherwise nothing, so
        indexes stay built when first needed (``lengths=``)."""
        if self.first is not None and self.first.deferred:
            self.get(build, epoch)

    def indexing(self, shard: int, records: Iterator) -> Iterator:
        """Shard ``shard``'s records as streamed, passed on (and indexed as
        they go by, for a shard :attr:`first` defers)."""
        return records if self.first is None else self.first.indexing(shard, records)

    def _build(self, build: Callable[[lister.Listing, list | None, SaveIndex], list]) -> list:
        paths = self.listing.files
        if self.index is False:
            return [None] * len(paths)
        index, save = index_argument(self.index, len(paths))
        if self.first is None:
            built = build(self.listing, index, save)
        else:
            built = self.first.open(self.listing, lambda listing: build(listing, index, save))
        check_lengths_found(paths, built, self.lengths)
        return built

    def __getstate__(self) -> dict:  # a lock does not pickle
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def check_lengths_found(paths: list[str], built: list, lengths: list[int] | None) -> None:
    """The indexes ``built`` hold the record counts ``lengths=`` gave (if it did)."""
    for path, found, expected in zip(paths, built, lengths or ()):
        if found is None:
            raise TFRecordError(f"{path}: a compressed shard cannot be read by position, but "
                                f"lengths= gave its record count ({expected})")
        if len(found) != expected:
            raise TFRecordError(f"{path}: lengths= (dataset_info.json's shardLengths for a TFDS "
                                f"folder) says {expected} records, but the shard holds {len(found)}")


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
