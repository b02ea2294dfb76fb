"""A map-style dataset over indexed shards: random access by record number."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch.utils.data

from tfrecord_torch._types import PathLike, Paths
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.reading import Located, decode_item
from tfrecord_torch.data.shards import describe_shards, find_shards, shard_indexes
from tfrecord_torch.errors import CorruptRecordError, FeatureError, TFRecordError
from tfrecord_torch.features.sequence import make_spec
from tfrecord_torch.io import pool
from tfrecord_torch.policy import OnError
from tfrecord_torch.records.compression import is_compressed
from tfrecord_torch.records.framing import parse_frame

__all__ = ["IndexedTFRecordDataset"]


class IndexedTFRecordDataset(torch.utils.data.Dataset):
    """Records of many shards as one sequence, read by O(1) seeks.

    Works with any sampler (RandomSampler, DistributedSampler, ``random_split``).
    Files are opened lazily in each process that reads, never shared across
    a fork.

    Args:
        paths: a path, a glob pattern, a directory, or a list of these
            (uncompressed shards; compressed ones cannot be seeked).
        features: a feature spec (or TF ``feature_description``); None gives
            :func:`parse_example` dicts; with ``sequence_features``, the context's spec.
        sequence_features: read SequenceExamples (see :class:`TFRecordDataset`).
        index: None (each shard's index, built and cached if missing) or a
            list of index paths, one per shard.
        transform: a callable applied to each item.
        verify: check record CRCs.
        on_error: "raise" (default), "skip", "warn" or a callable: a record that is corrupt
            or fails to decode is logged and counted (:meth:`errors`), and the
            next readable record stands in for it, so every index still gives an
            item and a sampler's batches stay full (that record then appears
            twice in the epoch). Each bad record is reported once per process;
            later requests for it go straight to its stand-in, so a run of k
            bad records costs O(k) reads, not O(k^2). Failures to reach
            storage always raise.
        storage_options: fsspec options for URLs (each record is one range request).
    """

    def __init__(self, paths: Paths, *, features: dict | None = None, sequence_features: dict | None = None,
                 index: Sequence[PathLike] | None = None,
                 transform: Callable | None = None, verify: bool = True, on_error: OnError = "raise",
                 storage_options: dict | None = None) -> None:
        listing = find_shards(paths, storage_options)
        self.paths = listing.files
        self.policy = SharedErrorPolicy(on_error, self.paths)
        if index is not None:
            for p in self.paths:
                if is_compressed(p, "auto", storage_options):
                    raise _compressed(p)
            index = list(index)
            if len(index) != len(self.paths):
                raise ValueError(f"index: got {len(index)} index files for {len(self.paths)} shards")
        indexes = shard_indexes(listing, index=index, report=self.policy.reporter(),
                                storage_options=storage_options)
        for p, i in zip(self.paths, indexes):
            if i is None:
                raise _compressed(p)
        self.indexes: list[np.ndarray] = [i for i in indexes if i is not None]
        self._readers = pool.ReaderPool(storage_options)
        self._stand_in: dict[int, int] = {}  # bad item -> the readable item that replaced it (per process)
        self.ends = np.cumsum([len(i) for i in self.indexes], dtype=np.int64)
        self.spec = make_spec(features, sequence_features)
        self.transform, self.verify = transform, verify

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __repr__(self) -> str:
        features = sorted(self.spec) if self.spec is not None else None
        return f"{type(self).__name__}({describe_shards(self.paths)}, {len(self):,} records, features={features})"

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
        n = len(self)
        j = int(i) % n
        passed = []  # unreadable items passed over on the way to a readable one
        for _ in range(n):
            j = self._stand_in.get(j, j)  # a run of bad items found before: jump past it
            shard, r = self.locate(j)
            try:
                item = self._read(shard, r)
            except (CorruptRecordError, FeatureError) as e:
                self.policy.report(e)  # raises under on_error="raise"
                passed.append(j)
                j = (j + 1) % n
                continue
            for k in passed:  # later requests for these jump straight here: linear, not quadratic
                self._stand_in[k] = j
            return item
        raise TFRecordError(f"none of the {n} records of {len(self.paths)} shard(s) is readable")

    def errors(self) -> dict:
        """Records replaced under ``on_error="skip"/"warn"`` so far, over all
        worker processes: ``{"total": n, "per_shard": {path: n}}``."""
        return self.policy.summary()

    def _read(self, shard: int, r: int):
        path = self.paths[shard]
        offset, size = (int(v) for v in self.indexes[shard][r])
        data = self._readers.read(path, offset, size)
        item = Located(parse_frame(data, name=path, offset=offset, record=r, verify=self.verify),
                       path, offset, r)
        return decode_item(item, self.spec, self.transform)

    def close(self) -> None:
        """Close the open shard files (they reopen on the next read)."""
        self._readers.close()


def _compressed(path: str) -> TFRecordError:
    return TFRecordError(f"{path}: compressed shards cannot be read by index; use "
                         "TFRecordDataset to stream them, or `tfrecord-torch decompress`")
