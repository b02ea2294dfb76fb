"""Small generator stages of the datasets: a shuffle buffer, fixed-size chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["chunked", "columns", "shuffle_buffer"]


def shuffle_buffer(items: Iterable, size: int, rng: np.random.Generator) -> Iterator:
    """tf.data's ``shuffle(size)``: items leave a buffer of ``size`` at random
    positions as new ones come in; the rest leave shuffled at the end."""
    if size <= 1:
        yield from items
        return
    buffer: list = []
    for item in items:
        if len(buffer) < size:
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
