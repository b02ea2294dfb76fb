"""Epoch 0 over remote shards that have no index objects: streamed, indexed as it goes.

Indexing such a shard when the dataset is made means reading it whole: for a
bucket as a TensorFlow team keeps it (no index objects), a full download
before the first record, again on every machine whose index cache is empty.
Instead the dataset defers those shards: epoch 0 streams every shard whole,
dealt once over ranks and DataLoader workers and mixed in a shuffle buffer
(as tf.data reads), and each deferred shard read to its end leaves its index
in the local index cache, built from the records as they went by (the stream
reads each byte once; with the shard cache, from the copy it keeps). Epochs
1 and later index the deferred shards from the cache (scanning only the
shards it lacks: those other machines streamed, or an epoch 0 broken off)
and read in the global permutation.

Which shards are deferred is decided from the listing alone, and which
epochs stream from the epoch's number alone, so every rank of a job on
several machines takes the same mode whatever each machine's cache holds.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tfrecord_torch.data import elastic
from tfrecord_torch.data.reading import Located
from tfrecord_torch.io.files import is_url
from tfrecord_torch.io.listing import Listing
from tfrecord_torch.records.compression import compression_from_name
from tfrecord_torch.records.shardindex import cache_remote_index, cached_remote_index, index_candidates

__all__ = ["FirstEpoch", "saved_epoch"]

STREAMED_EPOCH = 0  # the epoch that streams the deferred shards

Build = Callable[[Listing], list]  # indexes of a listing's files (data.shards.shard_indexes, bound)


class FirstEpoch:
    """The shards a dataset leaves unindexed until its epoch 0 has streamed
    them, and their indexes once known. Owned by the dataset; pickled with
    it to DataLoader workers (each finds the indexes in the shared cache).

    Args:
        listing: the dataset's listing.
        deferred: the numbers of the deferred shards (ascending).
    """

    def __init__(self, listing: Listing, deferred: tuple[int, ...], compression: Any = "auto") -> None:
        self.listing, self.paths, self.compression = listing, list(listing.files), compression
        self.stats = {self.paths[i]: listing.stats[self.paths[i]] for i in deferred}
        self.deferred = deferred
        self._opened: list | None = None  # epoch 0's indexes: None for the deferred shards
        self._indexed: list | None = None  # later epochs' indexes

    @classmethod
    def of(cls, listing: Listing, source: Any, *, ranks_fit: bool) -> FirstEpoch:
        """Defer the remote shards (of a store whose folders are listed) that
        the listing shows have no index object, none of them empty; none
        where ``source`` (the dataset's ``Source``) gives ``index=`` or
        ``lengths=``, or unless ``ranks_fit`` (``even=None``, and no fewer
        shards than ranks: the shards can be dealt whole)."""
        deferred: tuple[int, ...] = ()
        if ranks_fit and source.index is None and source.lengths is None:
            deferred = tuple(i for i, path in enumerate(listing.files) if _unindexed(path, listing))
        return cls(listing, deferred, source.compression)

    def open(self, listing: Listing, build: Build) -> list:
        """Each shard's index for epoch 0: ``build``'s for the shards not
        deferred, None (streamed) for the deferred ones, which are not read."""
        if not self.deferred:
            return build(listing)
        skip = set(self.deferred)
        rest = [p for i, p in enumerate(listing.files) if i not in skip]
        built = iter(build(listing._replace(files=rest)) if rest else [])
        self._opened = [None if i in skip else next(built) for i in range(len(listing.files))]
        return self._opened

    def streams(self, epoch: int) -> bool:
        """Whether ``epoch`` streams deferred shards."""
        return bool(self.deferred) and epoch == STREAMED_EPOCH

    def indexes_for(self, epoch: int, opened: list, build: Build) -> list:
        """The indexes ``epoch`` reads by: ``opened`` (epoch 0's) in epoch 0;
        after it, the deferred shards' from the index cache, ``build``'s
        (a scan, or None for a compressed shard) for those it lacks."""
        if self._opened is None:
            self._opened = list(opened)
        if self.streams(epoch):
            return self._opened
        if self._indexed is None:
            found = {i: cached_remote_index(self.paths[i], self.stats[self.paths[i]]) for i in self.deferred}
            missing = [i for i, index in found.items() if index is None]
            if missing:
                found.update(zip(missing, build(self.listing._replace(files=[self.paths[i] for i in missing]))))
            self._indexed = [found.get(i, index) for i, index in enumerate(self._opened)]
        return self._indexed

    def indexing(self, shard: int, records: Iterator[Located]) -> Iterator[Located]:
        """``records`` (shard ``shard`` streamed), passed on; a deferred shard
        read to its end with its records tiling the object leaves its index
        in the index cache."""
        if shard not in self.deferred:
            return records
        return self._indexing(self.paths[shard], records)

    def _indexing(self, path: str, records: Iterator[Located]) -> Iterator[Located]:
        rows = array("q")  # offset, framed size; of each record in turn
        for record in records:
            rows.extend((record.offset, len(record.payload) + 16))  # length, its CRC, the payload, its CRC
            yield record
        plain = self.compression is None or (self.compression == "auto" and compression_from_name(path) is None)
        if plain:  # the offsets of a compressed stream are not the object's
            cache_remote_index(path, self.stats[path], np.frombuffer(rows, np.int64).reshape(-1, 2).copy())

    def unknown_length(self) -> str:
        """Why ``len()`` is not known in epoch 0."""
        n = len(self.deferred)
        return (f"len() is unknown in epoch 0: {n} of {len(self.paths)} remote shards have no index objects, and "
                "epoch 0 streams them whole (dealt to ranks and DataLoader workers, shard by shard) instead of "
                "downloading them to count their records first; it indexes them as it reads. From epoch 1 on "
                "(the next iteration, or after ds.set_epoch(1)) len() counts the records. To know it before "
                "training, index the shards once (`tfrecord-torch index URLS` writes index objects beside "
                "them, or pass Source(index='beside'))")

    def __repr__(self) -> str:
        return f"FirstEpoch({len(self.deferred)} of {len(self.paths)} shards deferred)"


def _unindexed(path: str, listing: Listing) -> bool:
    stat = listing.stats.get(path)
    return (is_url(path) and stat is not None and stat[0] > 0
            and all(listing.knows(candidate) is False for candidate in index_candidates(path)))


def saved_epoch(state: Any, what: str) -> int | None:
    """The epoch a ``state_dict()`` (a dataset's or a StatefulDataLoader's)
    resumes, or None if it does not say (its load raises then)."""
    try:
        epoch = elastic.reader_states(state, what)[0].get("epoch")
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return epoch if isinstance(epoch, int) else None
