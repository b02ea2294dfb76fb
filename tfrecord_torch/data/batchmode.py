"""Batch mode of :class:`~tfrecord_torch.data.iterable.TFRecordDataset`: whole
batches parsed column-wise and their images decoded into one buffer, by a
:class:`BatchPipeline` the dataset builds for each iteration."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from tfrecord_torch._pending import Done, Failed, Later, Pending
from tfrecord_torch.data import plan as sharding
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.imagebatch import DecodedBatch, ImageBatches, SizeMismatch, drop_rows
from tfrecord_torch.data.iteration import Reader, ShardReads, Share
from tfrecord_torch.data.prefetch import Started, ahead
from tfrecord_torch.data.reading import (
    SKIPPED,
    Located,
    ReadContext,
    decode_or_skip,
    fetch_runs,
    fetch_scattered,
    serialized_tensor,
)
from tfrecord_torch.data.session import ReadSession, Scatter
from tfrecord_torch.errors import ExampleDecodeError, FeatureError, MixedSizesError
from tfrecord_torch.example.batch import parse_example_batch, parse_record_batch
from tfrecord_torch.features.collate import sequence_collate
from tfrecord_torch.features.images.engine import ImageBatching
from tfrecord_torch.features.payload import Payload
from tfrecord_torch.features.sequence import SequenceSpec

__all__ = ["BatchDecoding", "BatchPipeline", "mixed_sizes"]


@dataclass(frozen=True)
class BatchDecoding:
    """How batch mode decodes one iteration's batches.

    Attributes:
        spec: the dataset's feature spec (None, a dict or a SequenceSpec).
        transform: the dataset's transform.
        images: the image fast path's options; None when it is off.
        seed_key: the ints that seed the fused crops of this iteration
            (seed, epoch, rank).
        prefetch: batches started ahead on a producer thread (0: one
            started ahead on the consumer's thread).
    """

    spec: Any
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
        self.spec, self.transform, self.images = decoding.spec, decoding.transform, decoding.images
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
        of consecutive records, read in windows with no per-record objects;
        shuffled, they are gathered shard by shard."""
        if not self.shuffle:
            segments = list(plan.segments(a, b))
            session.began([seg.shard for seg in segments])
            runs = [run for seg in segments
                    for run in fetch_runs(self.paths[seg.shard], self.indexes[seg.shard], seg.records,
                                          context)]
            payloads = runs[0].payloads if len(runs) == 1 else [p for r in runs for p in r.payloads]
            return payloads, lambda: [i for r in runs for i in r.items()]
        shards, records = plan.pairs(a, b)
        session.began(shards)
        found = fetch_scattered(self.paths, self.indexes, shards, records, context)
        items = [i for i in found if i is not None]
        return [i.payload for i in items], lambda: items

    def image_batches(self, where: tuple[int, ...]) -> ImageBatches:
        """The batch decoder of one iterator; ``where`` adds to the crop seed."""
        return ImageBatches(self.spec if isinstance(self.spec, dict) else {}, self.transform, self.images,
                            (*self.seed_key, *where), self.prefetch)

    def decode_streamed_batch(self, items: list[Located], batches: ImageBatches, number: int):
        """One decoded batch of streamed records ``items`` (``number``: its
        position, for the crop seed)."""
        return self._decode_batch([i.payload for i in items], lambda: items, batches, number)

    def _decode_batch(self, payloads: list[bytes], items: Callable[[], list[Located]],
                      batches: ImageBatches, number: int):
        """One decoded batch of ``payloads``; a bad record is found (among
        ``items()``, the same records with their locations) and named, and when
        the policy skips, left out of the batch."""
        return self._begin_batch(payloads, items, batches, number).result()

    def _begin_batch(self, payloads: list[bytes], items: Callable[[], list[Located]],
                     batches: ImageBatches, number: int) -> Pending[Any]:
        """:meth:`_decode_batch`, started: its images decode on the engine's
        threads meanwhile; the result is the batch. Errors (and their
        reports) come from the result, so they follow the batches before."""
        if isinstance(self.spec, SequenceSpec):  # per record, then T padded (pad_collate)
            return Later(self._sequence_batch, items)
        if isinstance(self.spec, Payload):
            return Later(self._payload_batch, self.spec, payloads, items)
        try:
            if not payloads:
                return Done(SKIPPED)
            if self.spec is None:  # a SequenceExample's feature lists too, not its context alone
                batch = parse_record_batch(payloads)
                if not batch:  # no features at all: empty Examples, or serialized tensors
                    return Later(self._featureless_batch, batch, items)
                self.policy.delivered(len(payloads))
                return Later(self.transform, batch) if self.transform is not None else Done(batch)
            columns = parse_example_batch(payloads)
            pending = batches.begin(columns, len(payloads), number)
        except (ExampleDecodeError, FeatureError):
            return Later(self._fallback_batch, items, batches, number)
        except SizeMismatch as e:
            return Failed(mixed_sizes(e, items()))
        return Later(self._end_batch, pending, items, batches, len(payloads))

    def _end_batch(self, pending: Pending[DecodedBatch], items: Callable[[], list[Located]],
                   batches: ImageBatches, size: int) -> Any:
        """The batch of :meth:`_begin_batch` once its images are decoded: the
        records whose image failed reported (or raised) and dropped."""
        try:
            batch, failures = pending.result()
        except SizeMismatch as e:
            raise mixed_sizes(e, items()) from None
        if failures:
            located = items()
            for i, error in sorted(failures.items()):
                self.policy.report(error.at(located[i].path, located[i].offset, located[i].record))
            if len(failures) == size:
                return SKIPPED
            batch = drop_rows(batch, set(failures), size)
        self.policy.delivered(size - len(failures))
        return batches.finish(batch)

    def _featureless_batch(self, batch: dict, items: Callable[[], list[Located]]):
        """A batch read without a spec that holds no feature: its records that
        are serialized tensors, not Examples, reported (or raised); SKIPPED if
        all are."""
        located = items()
        tensors = [e for e in (serialized_tensor(*i) for i in located) if e is not None]
        for error in tensors:
            self.policy.report(error)
        if len(tensors) == len(located):
            return SKIPPED
        self.policy.delivered(len(located) - len(tensors))
        return self.transform(batch) if self.transform is not None else batch

    def _fallback_batch(self, items: Callable[[], list[Located]], batches: ImageBatches, number: int):
        """A batch that did not parse or decode as a whole: record by record."""
        good = [i for i in items() if decode_or_skip(i, self.spec, None, self.policy.reporter())
                is not SKIPPED]  # raises under "raise", naming the record
        return self.decode_streamed_batch(good, batches, number)

    def _payload_batch(self, spec: Payload, payloads: list[bytes], items: Callable[[], list[Located]]):
        """A batch of records read as payloads: the list of their items (a
        payload the hook fails on reported, or raised, and left out)."""
        if spec.decode is None:
            batch = list(payloads)
        else:
            batch, located = [], None
            for k, payload in enumerate(payloads):
                try:
                    batch.append(spec.decode(payload))
                except Exception as e:  # a bad record: located, then under on_error
                    located = located or items()
                    at = located[k]
                    error = spec.failed(e, at.path, at.offset, at.record)
                    error.__cause__ = e
                    self.policy.report(error)
        if not batch:
            return SKIPPED
        self.policy.delivered(len(batch))
        return self.transform(batch) if self.transform is not None else batch

    def _sequence_batch(self, items: Callable[[], list[Located]]):
        decoded = [r for r in (decode_or_skip(i, self.spec, None, self.policy.reporter()) for i in items())
                   if r is not SKIPPED]
        if not decoded:
            return SKIPPED
        self.policy.delivered(len(decoded))
        batch = sequence_collate(decoded, tuple(cast(SequenceSpec, self.spec).sequence))
        return self.transform(batch) if self.transform is not None else batch


def mixed_sizes(e: SizeMismatch, located: list[Located]) -> MixedSizesError:
    """The error naming the first record whose value's shape differs from the
    batch's first (positions of ``e.shapes`` are those of ``located``)."""
    first = e.shapes[0]
    other = next(i for i, s in enumerate(e.shapes) if s != first)

    def where(i: int) -> str:
        shape = e.shapes[i]
        size = "no value" if shape is None else "x".join(map(str, shape))
        return f"{located[i].path}: record {located[i].record} at byte offset {located[i].offset} ({size})"

    return MixedSizesError(
        f"feature {e.key!r} ('{e.name}') differs in size within one batch -- {where(0)}, but {where(other)} -- "
        f"and in batch mode images and masks come as one tensor [B, ...]: {e.hint}")
