"""Streamed (compressed, or unindexed) shards of
:class:`~tfrecord_torch.data.iterable.TFRecordDataset`: dealt whole to the
readers, each reader's shards interleaved through one
:class:`~tfrecord_torch.data.session.ReadSession`; and the errors and
warnings for readers dealt none."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tfrecord_torch.data import plan
from tfrecord_torch.data.decodeahead import RecordDecoder
from tfrecord_torch.data.describe import Shown
from tfrecord_torch.data.iteration import Reader, ShardReads
from tfrecord_torch.data.reading import Located, interleave, stream_shard
from tfrecord_torch.data.session import ReadSession
from tfrecord_torch.data.shards import LazyIndexes

__all__ = ["Streamed", "check_streamed", "closing", "dealt_shards", "decoded", "idle_ranks", "no_shards",
           "open_streamed"]

STREAMED_REMEDY = ("compressed shards cannot be indexed: decompress them (`tfrecord-torch decompress`) so "
                   "their records are split over every rank and worker, or write more shards than "
                   "ranks x DataLoader workers")
FIRST_EPOCH_REMEDY = ("epoch 0 streams remote shards without index objects whole (from epoch 1 on their records "
                      "are split over every rank and worker); give them index objects (`tfrecord-torch index`) "
                      "to split epoch 0 too")
UNINDEXED_REMEDY = ("Source(index=False) streams the shards: leave index= at its default so their records "
                    "are split over every rank and worker, or write more shards than ranks x DataLoader workers")


class Streamed:
    """A reader's streamed shards: their records, interleaved (:attr:`located`,
    read as they are taken), through one :class:`ReadSession` (:attr:`session`)
    made when the first record is taken and closed by :func:`closing`. An
    iterator dropped before its first record has opened nothing: the session
    would copy shards ahead on a thread that nothing closes."""

    def __init__(self, reads: ShardReads, shards: list[int], *, report: Callable | None, compression: Any,
                 cycle_length: int, indexing: Callable[[int, Iterator[Located]], Iterator[Located]] | None) -> None:
        self.session: ReadSession | None = None
        self.located = self._located(reads, shards, report, compression, cycle_length, indexing)

    def _located(self, reads: ShardReads, shards: list[int], report: Callable | None, compression: Any,
                 cycle_length: int, indexing: Callable[[int, Iterator[Located]], Iterator[Located]] | None
                 ) -> Iterator[Located]:
        session = self.session = ReadSession(reads.remote, reads.paths, verify=reads.verify, report=report,
                                             order=list(shards))

        def opened(shard: int):
            session.began([shard])
            records = stream_shard(reads.paths[shard], session.context, compression=compression)
            return records if indexing is None else indexing(shard, records)

        yield from interleave([functools.partial(opened, s) for s in shards], cycle_length)


def open_streamed(reads: ShardReads, shards: list[int], *, report: Callable | None, compression: Any,
                  cycle_length: int, indexing: Callable[[int, Iterator[Located]], Iterator[Located]] | None = None
                  ) -> Streamed:
    """The records of ``shards`` (numbers, in the order dealt), ``cycle_length``
    of them interleaved, each shard opened through the session when its turn
    comes; ``indexing(shard, records)`` passes a shard's records on (epoch 0
    indexes remote shards as it reads them: :mod:`~tfrecord_torch.data.firstepoch`)."""
    return Streamed(reads, shards, report=report, compression=compression, cycle_length=cycle_length,
                    indexing=indexing)


def decoded(units: Iterable[Located], skip: int, decoder: RecordDecoder) -> Iterator[tuple[int, Any]]:
    """(position, decoded record) of ``units``; the first ``skip`` are read again but not decoded."""
    yield from decoder.each((position, unit) for position, unit in enumerate(units, start=1) if position > skip)


def closing(items: Iterator, streamed: Streamed) -> Iterator:
    """``items``, with the session of ``streamed`` closed when they end or are
    dropped (its copies' fills let end first when the items ran out)."""
    ended = False
    try:
        yield from items
        ended = True
    finally:
        if streamed.session is not None:  # opened by the first record taken
            streamed.session.close(ended)


def check_streamed(shards: int, world_size: int, even: str | None, indexed_off: bool) -> None:
    """Refuse what a dataset that streams shards cannot do: ``even`` (it
    needs record counts), or fewer shards than ranks (a rank would read nothing)."""
    if even is not None:
        raise ValueError("even='pad'/'drop' needs record counts, but some shards are compressed "
                         "(cannot be indexed); decompress them or use even=None")
    if shards < world_size:
        raise ValueError(idle_ranks(shards, world_size, None, indexed_off))


def dealt_shards(shown: Shown, shards: int, reader: Reader, indexes: LazyIndexes) -> list[int]:
    """The numbers of the ``shards`` streamed shards this reader reads whole,
    dealt over ranks and workers (shuffled per epoch); none is an error or a
    warning (:func:`no_shards`). In epoch 0 of remote shards without index
    objects (``indexes`` deferred them: :mod:`~tfrecord_torch.data.firstepoch`),
    which are no fewer than the ranks, the shards are dealt to every rank
    first, so each rank reads some, as it would read some of their records
    indexed."""
    indexed_off, first_epoch = indexes.off, indexes.streams_deferred(shown.epoch)
    dealt = plan.plan_shards(shards, rank=shown.rank, world_size=shown.world_size, worker=reader.worker,
                             num_workers=reader.workers, shuffle=shown.shuffle, seed=shown.seed, epoch=shown.epoch,
                             ranks_first=first_epoch)
    if not dealt:
        no_shards(shown.name, shards=shards, rank=shown.rank, world_size=shown.world_size, worker=reader.worker,
                  workers=reader.workers, indexed_off=indexed_off, first_epoch=first_epoch)
    return dealt


def no_shards(name: str, *, shards: int, rank: int, world_size: int, worker: int, workers: int,
              indexed_off: bool, first_epoch: bool = False) -> None:
    """A reader was dealt no streamed shard: an error if its whole rank was
    (DDP would wait for that rank forever), else a warning (an idle
    DataLoader worker). ``first_epoch``: dealt ranks first (:func:`dealt_shards`)."""
    first_reader = rank if first_epoch else rank * workers  # the rank's reader dealt the earliest position
    if first_reader >= shards:
        raise ValueError(idle_ranks(shards, world_size, workers, indexed_off, rank))
    readers = f"{world_size} ranks x {workers}" if world_size > 1 else f"{workers}"
    remedy = FIRST_EPOCH_REMEDY if first_epoch else STREAMED_REMEDY if not indexed_off else UNINDEXED_REMEDY
    warnings.warn(f"{name}: DataLoader worker {worker} of {workers}"
                  f"{f' on rank {rank}' if world_size > 1 else ''} reads nothing: {shards} streamed "
                  f"shard(s) are dealt whole to {readers} DataLoader workers; {remedy}, or use fewer workers",
                  RuntimeWarning, stacklevel=2)


def idle_ranks(shards: int, world_size: int, workers: int | None, indexed_off: bool, rank: int | None = None
               ) -> str:
    """The error for streamed shards that leave a rank with nothing to read."""
    if workers is None:
        who = f"rank {shards} reads nothing" if shards == world_size - 1 else \
            f"ranks {shards} to {world_size - 1} read nothing"
    else:
        who = f"rank {rank} reads nothing with {workers} DataLoader workers per rank"
    return (f"{shards} streamed shard(s) for {world_size} ranks: shards are dealt whole, so {who}, and "
            f"DistributedDataParallel would wait for them forever; "
            f"{UNINDEXED_REMEDY if indexed_off else STREAMED_REMEDY}")
