"""Small generator stages of the datasets: a shuffle buffer, fixed-size chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["chunked", "columns", "shuffle_buffer"]

RAMP_FIRST = 128  # items in a shuffle buffer before the first leaves (the buffer then grows to its size)


def shuffle_buffer(items: Iterable, size: int, rng: np.random.Generator) -> Iterator:
    """tf.data's ``shuffle(size)``, without its wait for a full buffer: items
    leave a buffer at random positions as new ones come in; the rest leave
    shuffled at the end.

    tf.data yields nothing until ``size`` items are in; with 10,000 ImageNet
    records that is 1.2 GB read (and held) per worker before the first
    batch. Here the buffer starts yielding once it holds ``RAMP_FIRST``
    items and then grows by one item for every two that come in (one of the
    two leaves), up to ``size``: the first batch comes after a few hundred
    records, the buffer is full after ``2 * size`` of them, and from then on
    it is tf.data's. The items of the first batches are drawn from fewer
    records than tf.data's are, but from the same few shards: a stream's
    start holds the first records of the first shards it reads in either."""
    if size <= 1:
        yield from items
        return
    buffer: list = []
    for n, item in enumerate(items):  # while under size past RAMP_FIRST, every other item stays
        if len(buffer) < min(size, RAMP_FIRST) or (len(buffer) < size and (n - RAMP_FIRST) % 2 == 0):
            buffer.append(item)
            continue
        i = int(rng.integers(len(buffer)))
        buffer[i], item = item, buffer[i]
        yield item
    rng.shuffle(buffer)
    yield from buffer


def chunked(items: Iterable, size: int, drop_last: bool) -> Iterator[list]:
    """Lists of ``size`` consecutive items (the last one shorter unless dropped)."""
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


def columns(pairs: list) -> tuple[np.ndarray, np.ndarray]:
    """(shards, records) int64 arrays from a list of (shard, record) pairs."""
    array = np.asarray(pairs, np.int64).reshape(-1, 2)
    return array[:, 0], array[:, 1]
