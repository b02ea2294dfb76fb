"""Batch mode of :class:`~tfrecord_torch.data.iterable.TFRecordDataset`: whole
batches parsed column-wise and their images decoded into one buffer, by a
:class:`BatchPipeline` the dataset builds for each iteration."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tfrecord_torch._pending import Pending
from tfrecord_torch.data import plan as sharding
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.imagebatch import ImageBatches
from tfrecord_torch.data.iteration import Reader, ShardReads, Share
from tfrecord_torch.data.prefetch import Started, ahead
from tfrecord_torch.data.reading import (
    Located,
    ReadContext,
    fetch_runs,
    fetch_runs_together,
    gather_scattered,
)
from tfrecord_torch.data.recordspec import BatchRun, RecordBatch, RecordSpec
from tfrecord_torch.data.session import ReadSession, Scatter
from tfrecord_torch.features.images.engine import ImageBatching

__all__ = ["BatchDecoding", "BatchPipeline"]


@dataclass(frozen=True)
class BatchDecoding:
    """How batch mode decodes one iteration's batches.

    Attributes:
        record: the kind of record the dataset's spec reads (its
            :class:`~tfrecord_torch.data.recordspec.RecordSpec`).
        transform: the dataset's transform.
        images: the image fast path's options; None when it is off.
        seed_key: the ints that seed the fused crops of this iteration
            (seed, epoch, rank).
        prefetch: batches started ahead on a producer thread (0: one
            started ahead on the consumer's thread).
    """

    record: RecordSpec
    transform: Callable | None
    images: ImageBatching | None
    seed_key: tuple[int, ...]
    prefetch: int = 0


class BatchPipeline:
    """Batch mode of one iteration (``batch_size`` set): reads whole batches
    of records and decodes them column-wise, their images into one buffer.

    The dataset builds one per iteration from its settings as they stand
    (``spec``, ``transform`` and ``images`` may be reassigned between
    iterations); the per-epoch plan comes as :meth:`batches`' arguments.

    Args:
        reads: the shards (their indexes None where streamed: then only
            :meth:`decode_streamed_batch` applies), and how they are reached
            (:meth:`batches` reads through a
            :class:`~tfrecord_torch.data.session.ReadSession` of them).
        decoding: the spec, transform, image options, crop seed and prefetch.
        policy: the dataset's error policy (skips counted across workers).
    """

    def __init__(self, reads: ShardReads, decoding: BatchDecoding, policy: SharedErrorPolicy) -> None:
        self.paths, self.indexes, self.shuffle = reads.paths, reads.indexes, reads.shuffle
        self.verify, self.remote = reads.verify, reads.remote
        self.record, self.transform, self.images = decoding.record, decoding.transform, decoding.images
        self.seed_key, self.prefetch, self.policy = decoding.seed_key, decoding.prefetch, policy

    def batches(self, share: Share, size: int, count: int, reader: Reader) -> Iterator[tuple[int, Any]]:
        """Batches over indexed shards: batch b holds positions [lo + b*size,
        lo + (b+1)*size) of ``share``'s plan (up to ``hi``); worker w decodes
        batches w, w + workers, ... below ``count`` (after ``skip`` of its
        own). Yields (units finished, the batch or SKIPPED), ``prefetch``
        batches started ahead on a producer thread
        (:func:`~tfrecord_torch.data.prefetch.ahead`)."""
        plan, lo, hi = share
        worker, workers, skip = reader
        mine = list(range(worker, count, workers))[skip:]
        spans = ((lo + b * size, min(lo + (b + 1) * size, hi)) for b in mine)
        session = ReadSession(self.remote, self.paths, verify=self.verify, report=self.policy.reporter(),
                              indexes=self.indexes, scatter=Scatter(len(mine) * size, workers) if self.shuffle else None,
                              order=sharding.shards_in_order(plan, spans))
        with session:  # the engine and readers outlive the producer: results are taken after it ends
            batches = self.image_batches(())
            session.adopt(batches)

            def started() -> Iterator[Started]:
                for position, b in enumerate(mine, start=skip + 1):
                    a = lo + b * size
                    # the first batch waits for no fill's later ranges: its records past a fill's
                    # first range come from the bucket (at most a batch's bytes fetched twice)
                    context = session.first_context if position == skip + 1 else session.context
                    payloads, items = self._batch_records(plan, a, min(a + size, hi), session, context)
                    yield Started(position, self._begin_batch(payloads, items, batches, b))

            yield from ahead(started(), self.prefetch)

    def streamed_batches(self, units: Iterable[list[Located]], skip: int, where: tuple[int, ...]
                         ) -> Iterator[tuple[int, Any]]:
        """Batches of streamed records (``units``: lists of records, read as
        they are taken); the first ``skip`` are read again but not decoded;
        ``where`` adds to the crop seed. Yields (units finished, the batch or
        SKIPPED), ``prefetch`` batches started ahead."""
        batches = self.image_batches(where)

        def started() -> Iterator[Started]:
            for position, unit in enumerate(units, start=1):
                if position > skip:
                    yield Started(position, self._begin_batch([i.payload for i in unit], functools.partial(list, unit),
                                                              batches, position))

        try:
            yield from ahead(started(), self.prefetch)
        finally:
            batches.close()

    def _batch_records(self, plan: sharding.RangePlanner, a: int, b: int, session: ReadSession,
                       context: ReadContext) -> tuple[list[bytes], Callable[[], list[Located]]]:
        """The payloads of positions [a, b) of the plan, and a way to their locations
        (``session`` told first which shards they are in). In order, they are runs
        of consecutive records, read in windows with no per-record objects
        (the runs of several shards from the bucket fetched together);
        shuffled, they are gathered shard by shard."""
        if not self.shuffle:
            segments = list(plan.segments(a, b))
            numbers = [seg.shard for seg in segments]
            session.began(numbers)
            if len(segments) > 1 and session.from_bucket(numbers):
                runs = [run for shard in fetch_runs_together([self.paths[n] for n in numbers],
                                                             [self.indexes[n] for n in numbers],
                                                             [seg.records for seg in segments], context)
                        for run in shard]
            else:
                runs = [run for seg in segments
                        for run in fetch_runs(self.paths[seg.shard], self.indexes[seg.shard], seg.records,
                                              context)]
            payloads = runs[0].payloads if len(runs) == 1 else [p for r in runs for p in r.payloads]
            return payloads, lambda: [i for r in runs for i in r.items()]
        shards, records = plan.pairs(a, b)
        session.began(shards)
        found = gather_scattered(self.paths, self.indexes, shards, records, context)
        return found.payloads(), lambda: [i for i in found.items() if i is not None]

    def image_batches(self, where: tuple[int, ...]) -> ImageBatches:
        """The batch decoder of one iterator; ``where`` adds to the crop seed."""
        return ImageBatches(self.record.example_features(), self.transform, self.images,
                            (*self.seed_key, *where), self.prefetch)

    def _begin_batch(self, payloads: list[bytes], items: Callable[[], list[Located]],
                     batches: ImageBatches, number: int) -> Pending[Any]:
        """One batch of ``payloads``, started by its kind of record (images
        decode on the engine's threads meanwhile); the result is the batch. A
        bad record is found (among ``items()``, the same records with their
        locations) and named, and when the policy skips, left out. Errors
        (and their reports) come from the result, so they follow the batches
        before."""
        return self.record.begin_batch(RecordBatch(payloads, items, number),
                                       BatchRun(self.policy, self.transform, batches))
