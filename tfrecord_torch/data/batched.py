"""A batch of random-access items read in one pass: IndexedTFRecordDataset.__getitems__.

The records are read in file order (a global index grows with the shard and
with the record's offset in it), one positioned read per run of adjacent
records, each record read once however often it is asked for; then each
index asked is decoded on its own, so every item is a fresh object.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfrecord_torch.errors import CorruptRecordError, FeatureError

__all__ = ["fetch_items"]

_MAX_READ = 16 << 20  # bytes of adjacent records read at once


def fetch_items(ds: Any, indices: list[int]) -> list:
    """``[ds[i] for i in indices]`` (checked, non-negative indices), read in one
    pass; ``ds`` is the :class:`~tfrecord_torch.data.mapstyle.IndexedTFRecordDataset`
    (not imported here: it imports this module)."""
    if not indices:
        return []
    targets = [ds._stand_in.get(i, i) for i in indices]  # bad items met before: their stand-ins
    compiled = ds._compiled_items(targets)
    if compiled is not None:  # what it left (bad records too): one by one, in the order asked
        return [item if item is not None else ds[i] for i, item in zip(indices, compiled)]
    unique, inverse = np.unique(np.asarray(targets, np.int64), return_inverse=True)
    frames = _read_frames(ds, unique)
    out: list[Any] = [None] * len(indices)
    failed = []
    for pos, u in enumerate(inverse.tolist()):
        frame, path, offset, r = frames[u]
        try:
            out[pos] = ds._decode(frame, path, offset, r)
        except (CorruptRecordError, FeatureError):
            failed.append(pos)
    for pos in failed:  # in the order asked: exactly what ds[i], one by one, reports and returns
        out[pos] = ds[indices[pos]]
    return out


def _read_frames(ds: Any, unique: np.ndarray) -> list[tuple[bytes, str, int, int]]:
    """(frame bytes, path, offset, record) for each of the sorted global indices ``unique``."""
    shards = np.searchsorted(ds.ends, unique, side="right")
    frames: list[tuple[bytes, str, int, int]] = []
    cuts = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(unique)]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        shard = int(shards[lo])
        path = ds.paths[shard]
        records = unique[lo:hi] - ds._starts[shard]
        rows = ds.indexes[shard][records]
        with ds._readers.borrow(path) as reader:
            _read_shard(reader, path, rows[:, 0].tolist(), rows[:, 1].tolist(), records.tolist(), frames)
    return frames


def _read_shard(reader, path: str, offsets: list[int], sizes: list[int], records: list[int],
                frames: list) -> None:
    """Append the frames of one shard's records (ascending), one read per run
    of adjacent records of at most 16 MiB (at least one record)."""
    k, n = 0, len(offsets)
    while k < n:
        start = offsets[k]
        end = start + sizes[k]
        stop = k + 1
        while stop < n and offsets[stop] == end and end + sizes[stop] - start <= _MAX_READ:
            end += sizes[stop]
            stop += 1
        data = reader.read(start, end - start)
        if stop == k + 1:
            frames.append((data, path, start, records[k]))
        else:
            for j in range(k, stop):
                a = offsets[j] - start
                frames.append((data[a:a + sizes[j]], path, offsets[j], records[j]))
        k = stop
