"""The I/O of one iteration over a dataset's shards, and its one teardown.

A dataset decides once, when it is made, how it reaches its remote shards
(:class:`RemoteShards`: the shard cache's copies, or the check of the objects
against their listing). Each iteration then reads through a
:class:`ReadSession`, which owns what moves the bytes for that iteration:
fresh copies (each object asked once whether it changed since it was
listed), the listing check, the reader pool, the windows of a shuffled read
of small remote shards, the thread that copies shards ahead of the reader,
and the read contexts the record readers are handed. It closes them in one
order (:meth:`ReadSession.close`): the copies ahead, the copies' fills, an
adopted decoder, the readers. The datasets say what to read and how to
decode; the session says how the bytes move.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

from tfrecord_torch.data.reading import ReadContext
from tfrecord_torch.data.windows import shard_windows
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.io import pool, ranges
from tfrecord_torch.io.budget import ReadBudget
from tfrecord_torch.io.copies import CacheArg, ShardCopies, copy_ahead, dataset_copies, fills_for
from tfrecord_torch.io.files import is_url
from tfrecord_torch.io.listing import Listing, ListingCheck

__all__ = ["CacheArg", "Ranges", "ReadSession", "RemoteShards", "Scatter"]


@dataclasses.dataclass(frozen=True)
class RemoteShards:
    """How a dataset reaches its shards, decided once when it is made (and
    handed to DataLoader workers with it).

    Attributes:
        storage_options: fsspec options for URLs.
        copies: the shard cache's copies of the remote shards, or None:
            range reads.
        listed: without copies, the check of the remote shards against the
            dataset's listing, or None (the copies check their own objects).
        budget: the byte budgets of the reads (``Source(read_budget=)``):
            each session hands it to its reader pool (and so to the readers'
            range requests), its read contexts and its windows, and the
            copies to their fills.
    """

    storage_options: dict | None = None
    copies: ShardCopies | None = None
    listed: ListingCheck | None = None
    budget: ReadBudget = ReadBudget()

    @classmethod
    def of(cls, cache: CacheArg, listing: Listing, storage_options: dict | None, *, shuffled: bool,
           budget: ReadBudget | None = None) -> RemoteShards:
        """The copies the dataset of ``listing`` reads its remote shards from
        (:func:`~tfrecord_torch.io.copies.dataset_copies`: ``cache`` decided
        here, once), else its listing's check; ``shuffled``: a reader reads
        from all shards at once (a cache smaller than them is warned about);
        ``budget``: the reads' byte budgets (None: the defaults)."""
        budget = ReadBudget() if budget is None else budget
        copies = dataset_copies(cache, listing.files, listing.stats, storage_options, shuffled=shuffled,
                                budget=budget)
        return cls(storage_options, copies, listing.check(storage_options) if copies is None else None, budget)

    def fresh_copies(self, fills: int | None = None) -> ShardCopies | None:
        """The copies with no object checked yet (None without copies)."""
        return None if self.copies is None else self.copies.fresh(fills)


class Scatter(NamedTuple):
    """A shuffled read: its records come from all over its shards."""

    reads: int  # records this reader reads in the iteration (whether windows pay: shard_windows)
    workers: int  # readers of the iteration, DataLoader workers (each one's share of fills: fills_for)


class Ranges(NamedTuple):
    """Byte ranges of one shard: ``sizes[i]`` bytes at ``offsets[i]``."""

    path: str
    offsets: list[int]
    sizes: list[int]


class _Closes(Protocol):  # what ReadSession.adopt takes: something closed with the session
    def close(self) -> None: ...


class ReadSession:
    """The I/O of one iteration (a map-style dataset's: of its life in one
    process), and its teardown.

    Args:
        remote: how the dataset reaches its shards.
        paths: the dataset's shards; the session is told of them by number.
        verify: check record CRCs.
        report: the error policy's reporter (None: a bad record raises).
        indexes: each shard's index: its records are read through a reader
            pool (:attr:`readers`); None: the shards are streamed, each read
            through the copies (or checked against the listing) on its own.
        scatter: a shuffled read of ``indexes``: each worker fills
            :func:`~tfrecord_torch.io.copies.fills_for` copies at once,
            and small remote shards are fetched a window at a time
            (:func:`~tfrecord_torch.data.windows.shard_windows`); None: read
            in order (the copies' default fills, no windows).
        order: the shards the reader reads, by number, in the order it first
            reads them (lazy: worked out on the copying thread): their copies
            are made ahead of it (:meth:`began`). None: nothing copied ahead.
        fresh: the copies and listing check are this iteration's (each object
            asked once per iteration); False: the dataset's own (once per
            object and process: a map-style dataset's).

    Attributes:
        context: how the record readers read (:class:`~tfrecord_torch.data.reading.ReadContext`).
        first_context: ``context`` for the iteration's first reads: they wait
            for no fill's later ranges (a record past :attr:`first_far`
            beyond what a fill has written comes from the bucket).
        budget: the reads' byte budgets (the dataset's: ``remote.budget``).
        readers: the reader pool (None for streamed shards).
        copies: the copies this session reads (None: no shard cache).

    ``with ReadSession(...) as session:`` closes it when the block ends:
    ended (:meth:`close`'s ``ended``) only when the block ran to its end, not
    on an exception, nor on a generator closed or dropped at a ``yield``.
    """

    def __init__(self, remote: RemoteShards, paths: Sequence[str], *, verify: bool = True,
                 report: Callable[[TFRecordError], None] | None = None, indexes: Sequence[Any] | None = None,
                 scatter: Scatter | None = None, order: Iterable[int] | None = None, fresh: bool = True) -> None:
        self.paths, self.budget = paths, remote.budget
        self.copies = self._copies(remote, scatter) if fresh else remote.copies
        listing = remote.listed.fresh() if fresh and remote.listed is not None else remote.listed
        so = remote.storage_options
        self.readers: pool.ReaderPool | None = None
        self._adopted: _Closes | None = None
        if indexes is None:  # streamed: each shard through the copies or from the bucket, on its own
            self.context = ReadContext(storage_options=so, verify=verify, report=report, copies=self.copies,
                                       listing=listing, budget=self.budget)
        else:
            self.readers = pool.ReaderPool(so, copies=self.copies, listing=listing, budget=self.budget)
            windows = None
            if scatter is not None:  # scattered reads: small remote shards are fetched a window at a time, once
                copies = self.copies
                windows = shard_windows(paths, indexes, scatter.reads,
                                        [copies is not None and copies.covers(p) for p in paths], self.budget)
            self.context = ReadContext(storage_options=so, verify=verify, report=report, readers=self.readers,
                                       windows=windows, budget=self.budget)
        self._ahead = None if order is None else copy_ahead(self.copies, (paths[s] for s in order))
        self.first_context = dataclasses.replace(self.context, far=self.first_far)

    @property
    def first_far(self) -> int:
        """The bytes of a fill's first range a first read waits for: the
        budget's ``first``. Records past them that the fill has not written
        come from the bucket, waiting for no later range (a range request of
        a record costs one round trip, and a fill begun at the same time
        reaches 16 MiB several later). A property: a lasting session's first
        reads are each process's."""
        return self.budget.first

    def _copies(self, remote: RemoteShards, scatter: Scatter | None) -> ShardCopies | None:
        """This iteration's copies: given the workers of a shuffled read, each
        copies its share of the remote shards at once."""
        if remote.copies is None or scatter is None:
            return remote.fresh_copies()
        return remote.fresh_copies(fills_for(sum(map(remote.copies.covers, self.paths)), scatter.workers))

    def began(self, shards: Sequence[int] | np.ndarray) -> None:
        """The reader began reading shards ``shards`` (numbers, repeats
        allowed): the copies ahead keep their distance from them."""
        if self._ahead is not None:
            self._ahead.began(self.paths[s] for s in np.unique(np.asarray(shards)).tolist())

    def from_bucket(self, shards: Sequence[int] | np.ndarray) -> bool:
        """Whether reading shards ``shards`` waits on the bucket: some is a
        URL without a complete copy, and no fill being written to follow."""
        copies = self.copies
        return any(is_url(p) and (copies is None or not (copies.held(p) or copies.followed(p)))
                   for p in (self.paths[s] for s in np.unique(np.asarray(shards)).tolist()))

    def read(self, path: str, offset: int, size: int) -> bytes:
        """``size`` bytes of shard ``path`` at ``offset``, on the reader pool."""
        return cast(pool.ReaderPool, self.readers).read(path, offset, size)

    def descriptor(self, path: str) -> int | None:
        """The open file descriptor of local shard ``path`` on the reader
        pool (for the compiled reader); None for a URL."""
        return cast(pool.ReaderPool, self.readers).descriptor(path)

    def let_go(self) -> None:
        """Give back the reader this thread keeps on the reader pool (a
        thread about to end: :meth:`~tfrecord_torch.io.pool.ReaderPool.let_go`)."""
        if self.readers is not None:
            self.readers.let_go()

    def read_ranges(self, parts: Sequence[Ranges], *, first: bool = False) -> list[list[bytes]]:
        """The bytes of each part's ranges, on the reader pool
        (:func:`~tfrecord_torch.io.ranges.read_ranges`: near ranges in one
        read). Local files are read one at a time; with a URL among them,
        the requests of every part are in flight together, and ``first``
        (a process's first read) waits for no fill's later ranges
        (:attr:`first_far`)."""
        readers = cast(pool.ReaderPool, self.readers)
        if not any(is_url(part.path) for part in parts):  # one open file at a time
            read = []
            for part in parts:
                with readers.borrow(part.path) as reader:
                    read.append(ranges.read_ranges(reader, part.offsets, part.sizes))
            return read
        with contextlib.ExitStack() as stack:
            borrowed = [stack.enter_context(readers.borrow(part.path)) for part in parts]
            return ranges.read_many([(reader, part.offsets, part.sizes) for reader, part in zip(borrowed, parts)],
                                    far=self.first_far if first else None)

    def adopt(self, closes: _Closes) -> None:
        """Close ``closes`` (a batch decoder) with the session, after the
        copies and before the readers: its results are taken after the
        reading ends."""
        self._adopted = closes

    def close(self, ended: bool) -> None:
        """Stop the copying ahead, then the copies' fills, then the adopted
        decoder, then close the readers. ``ended``: the iteration ran to its
        end, so the copies begun are let end (the next epoch reads them).
        The reader pool and copies stay usable (a map-style dataset reads on)."""
        if self._ahead is not None:
            self._ahead.close(finish=ended)
        if self.copies is not None:
            self.copies.close(finish=ended)
        if self._adopted is not None:
            self._adopted.close()
        if self.readers is not None:
            self.readers.close()

    def __enter__(self) -> ReadSession:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self.close(ended=kind is None)

    def __repr__(self) -> str:
        return (f"ReadSession({len(self.paths)} shards, copies={self.copies is not None}, "
                f"pooled={self.readers is not None}, copying ahead={self._ahead is not None})")
