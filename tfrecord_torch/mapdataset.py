"""A map-style dataset over indexed shards: random access by record number."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import torch.utils.data

from . import fs
from .errors import TFRecordError
from .features import bind
from .framing import parse_frame
from .reading import Located, decode_item
from .shards import expand_paths, is_compressed, shard_index

__all__ = ["IndexedTFRecordDataset"]


class IndexedTFRecordDataset(torch.utils.data.Dataset):
    """Records of many shards as one sequence, read by O(1) seeks.

    Works with any sampler (RandomSampler, DistributedSampler, ``random_split``).
    Files are opened lazily in each process that reads, never shared across
    a fork.

    Args:
        paths: a path, a glob pattern, a directory, or a list of these
            (uncompressed shards; compressed ones cannot be seeked).
        features: a feature spec; None gives :func:`parse_example` dicts.
        index: None (each shard's index, built and cached if missing) or a
            list of index paths, one per shard.
        transform: a callable applied to each item.
        verify: check record CRCs.
        storage_options: fsspec options for URLs (each record is one range request).
    """

    def __init__(self, paths, *, features: dict | None = None, index=None,
                 transform: Callable | None = None, verify: bool = True,
                 storage_options: dict | None = None) -> None:
        self.paths = expand_paths(paths, storage_options)
        for p in self.paths:
            if is_compressed(p, "auto", storage_options):
                raise TFRecordError(f"{p}: compressed shards cannot be read by index; use "
                                    "TFRecordDataset to stream them, or `tfrecord-torch decompress`")
        if index is not None:
            index = list(index)
            if len(index) != len(self.paths):
                raise ValueError(f"index: got {len(index)} index files for {len(self.paths)} shards")
        self.indexes = [shard_index(p, None if index is None else os.fspath(index[i]),
                                    storage_options=storage_options)
                        for i, p in enumerate(self.paths)]
        self._readers = fs.Readers(storage_options)
        self.ends = np.cumsum([len(i) for i in self.indexes], dtype=np.int64)
        self.spec = bind(features) if features is not None else None
        self.transform, self.verify = transform, verify

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def locate(self, i: int) -> tuple[int, int]:
        """(shard number, record number in the shard) of item ``i``."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} records")
        i %= n
        shard = int(np.searchsorted(self.ends, i, side="right"))
        return shard, i - (int(self.ends[shard - 1]) if shard else 0)

    def __getitem__(self, i: int):
        shard, r = self.locate(int(i))
        path = self.paths[shard]
        offset, size = (int(v) for v in self.indexes[shard][r])
        data = self._readers.get(path).read(offset, size)
        item = Located(parse_frame(data, name=path, offset=offset, record=r, verify=self.verify),
                       path, offset, r)
        return decode_item(item, self.spec, self.transform)

    def close(self) -> None:
        """Close the open shard files (they reopen on the next read)."""
        self._readers.close()
