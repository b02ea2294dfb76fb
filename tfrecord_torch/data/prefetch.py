"""Batches made ahead of the loop that takes them.

Batch mode splits each batch's work in two. Its *start* reads the records,
parses them column-wise, scans the image headers, draws the fused crops
(from the batch's own generator, seeded by its number) and hands the images
to the decode threads; it hands back a :class:`~tfrecord_torch._pending.Pending`.
Its *result* waits for the decode threads, reports the records whose image
failed under ``on_error`` and runs what of ``transform=`` is not fused into
decoding (which may draw from torch's global generator, shared with the
training loop).

:func:`ahead` starts batches on a producer thread of its own, at most
``depth`` batches ahead of the one the consumer is taking, and takes each
result on the consumer's thread, in order. So the batches, the draws from
torch's global generator and the errors are the same, in the same order, as
with ``depth=0``, whatever the timing; only reading, parsing and starting
happen earlier. The producer owns the started batches until it hands them
over; the consumer owns them after, and each position counts a batch handed
to the consumer, never one merely started.

The consumer makes room as it hands a batch over, inside its ``next()``,
and the producer's start of a batch is Python (reading, parsing, the image
headers) that holds the GIL for a few milliseconds: begun at once, it made
the rest of that ``next()`` (the DataLoader's own code, which gives up the
GIL on each torch call) wait to take the GIL back, 1.2-1.5 ms a batch. So
the producer waits :data:`SETTLE` after room is made before it starts a
batch (at once when the consumer is already waiting for one): its Python
then runs while the loop steps.

``depth=0`` starts each batch on the consumer's thread while the one before
decodes (one batch ahead, no thread).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from tfrecord_torch._pending import Pending
from tfrecord_torch._threads import Producer

__all__ = ["SETTLE", "Prefetcher", "Started", "ahead"]

SETTLE = 0.001  # seconds the producer waits, after the consumer made room, before starting a batch


class Started(NamedTuple):
    """A started unit of work: ``position`` is the number of units finished
    once its result is delivered."""

    position: int
    batch: Pending[Any]


class Prefetcher:
    """Runs ``source`` on a producer thread, at most ``depth`` items ahead of
    the consumer, and gives its items back in order (:meth:`__iter__`); the
    consumer calls :meth:`taken` when done with one.

    The library's one producer loop (:class:`~tfrecord_torch._threads.Producer`,
    bounded by a count): the thread starts at construction and ends when
    ``source`` is exhausted or raises, or at :meth:`close`, which waits for it
    (the item being started finishes first) and closes ``source`` on that thread.

    Args:
        source: the started units (:class:`Started`), in order.
        depth: the most items started and not yet taken (>= 1).
    """

    def __init__(self, source: Iterator[Started], depth: int) -> None:
        self._producer: Producer[Started] = Producer(source, name="tfrecord-prefetch", limit=depth,
                                                     settle=SETTLE).start()

    def __iter__(self) -> Iterator[Started]:
        return self._producer

    def taken(self) -> None:
        """The consumer is done with an item: the producer may start one more."""
        self._producer.taken()

    def close(self) -> None:
        """Stop the producer and wait for it; items not taken are dropped."""
        self._producer.close()

    @property
    def alive(self) -> bool:
        return self._producer.alive


def ahead(source: Iterator[Started], depth: int) -> Iterator[tuple[int, Any]]:
    """``(position, result)`` of each started unit of ``source``, the result
    taken on the calling thread, in order.

    ``depth`` > 0: ``source`` runs on a :class:`Prefetcher` thread, at most
    ``depth`` units ahead; stopped and joined when this generator ends or is
    closed (a ``break``, a dropped iterator). ``depth`` = 0: ``source`` runs
    here, one unit started ahead of the one delivered. Either way an error
    of ``source`` comes after the units started before it.
    """
    if depth > 0:
        prefetcher = Prefetcher(source, depth)
        try:
            for position, batch in prefetcher:
                value = batch.result()
                # room made only now: the producer's Python then runs while the loop steps, not
                # during next() (where it would hold the GIL against the taking thread)
                prefetcher.taken()
                yield position, value
        finally:
            prefetcher.close()
        return
    pending: Started | None = None  # started while the next one is read
    try:
        while True:
            try:
                started = next(source)
            except StopIteration:
                break
            except BaseException:
                if pending is not None:  # the unit before the error still comes out first
                    done, pending = pending, None
                    yield done.position, done.batch.result()
                raise
            if pending is not None:
                done, pending = pending, None
                yield done.position, done.batch.result()
            pending = started
        if pending is not None:
            done, pending = pending, None
            yield done.position, done.batch.result()
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
