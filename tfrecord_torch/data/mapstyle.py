"""A map-style dataset over indexed shards: random access by record number.

``ds[i]`` finds the shard by bisecting the shards' cumulative record counts
(a short Python list), reads the record with one positioned read through the
thread-safe reader pool and decodes it. ``ds.__getitems__(indices)`` (what
the DataLoader calls for a batch) reads the records of a batch in file order,
one read per run of adjacent records, and hands them back in the order asked.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from tfrecord_torch._types import PathLike, Paths
from tfrecord_torch.data.batched import fetch_items
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.reading import decode_payload
from tfrecord_torch.data.shards import describe_shards, find_shards, index_argument, shard_indexes
from tfrecord_torch.data.usage import check_positional
from tfrecord_torch.errors import CorruptRecordError, FeatureError, TFRecordError
from tfrecord_torch.example.codec import compiled_reader, read_example, read_item
from tfrecord_torch.features.sequence import SequenceSpec, make_spec
from tfrecord_torch.features.specs import decode, decode_owned, item_plan, reads_once
from tfrecord_torch.features.undecoded import apply_transform
from tfrecord_torch.io import pool
from tfrecord_torch.io.files import is_url
from tfrecord_torch.policy import OnError
from tfrecord_torch.records.compression import is_compressed
from tfrecord_torch.records.framing import parse_frame
from tfrecord_torch.records.stale import explain

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
            :func:`~tfrecord_torch.example.codec.parse_record` dicts (a SequenceExample's context features
            and feature lists side by side); with ``sequence_features``, the context's spec.
        sequence_features: read SequenceExamples (see :class:`TFRecordDataset`).
        index: None (each shard's index: found beside it, else built and kept
            in the local index cache, never in the shards' folder), "beside"
            (indexes it builds are written beside the shards as ``<shard>.index``),
            or a list of index paths, one per shard.
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

    def __new__(cls, *args, **kwargs):
        check_positional(cls.__name__, args)  # before Python's "takes 2 positional arguments"
        return super().__new__(cls)

    def __init__(self, paths: Paths, *, features: dict | None = None, sequence_features: dict | None = None,
                 index: Sequence[PathLike] | str | None = None,
                 transform: Callable | None = None, verify: bool = True, on_error: OnError = "raise",
                 storage_options: dict | None = None) -> None:
        listing = find_shards(paths, storage_options)
        self.paths = listing.files
        self.policy = SharedErrorPolicy(on_error, self.paths)
        index, save = index_argument(index, len(self.paths))
        if index is not None:
            for p in self.paths:
                if is_compressed(p, "auto", storage_options):
                    raise _compressed(p)
        indexes = shard_indexes(listing, index=index, save=save, report=self.policy.reporter(),
                                storage_options=storage_options)
        for p, i in zip(self.paths, indexes):
            if i is None:
                raise _compressed(p)
        self.indexes: list[np.ndarray] = [i for i in indexes if i is not None]
        self._readers = pool.ReaderPool(storage_options)
        self._stand_in: dict[int, int] = {}  # bad item -> the readable item that replaced it (per process)
        self.ends = np.cumsum([len(i) for i in self.indexes], dtype=np.int64)
        self._ends: list[int] = self.ends.tolist()  # bisected per item: no numpy call
        self._starts: list[int] = [0, *self._ends[:-1]]
        self._len = self._ends[-1] if self._ends else 0
        self.spec = make_spec(features, sequence_features)
        self._planned = _plan(self.spec)
        self.transform, self.verify = transform, verify

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        features = sorted(self.spec) if self.spec is not None else None
        return f"{type(self).__name__}({describe_shards(self.paths)}, {len(self):,} records, features={features})"

    def locate(self, i: int) -> tuple[int, int]:
        """(shard number, record number in the shard) of item ``i``."""
        i = self._check(i)
        shard = bisect.bisect_right(self._ends, i)
        return shard, i - self._starts[shard]

    def _check(self, i) -> int:
        """``i`` as an index in [0, len), negative ones counted from the end."""
        i = operator.index(i)
        n = self._len
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} records")
        return i + n if i < 0 else i

    def __getitem__(self, i: int):
        """The decoded record ``i`` (a bad one replaced under ``on_error``: see the class)."""
        j = i if type(i) is int and 0 <= i < self._len else self._check(i)
        if self._stand_in:
            j = self._stand_in.get(j, j)  # a bad item met before: straight to its stand-in
        shard = bisect.bisect_right(self._ends, j) if len(self._ends) > 1 else 0
        try:
            return self._read(shard, j - self._starts[shard])
        except (CorruptRecordError, FeatureError) as e:
            return self._substitute(j, e)

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The decoded records ``indices``, in that order: what ``ds[i]`` gives
        for each, read in one pass in file order (by the compiled reader one
        record at a time where it can, else one positioned read per run of
        adjacent records) and decoded once per index asked. The DataLoader
        calls this for a batch. Every index is checked (IndexError) before
        anything is read; a bad record is replaced as ``ds[i]`` replaces it.
        """
        return fetch_items(self, [self._check(i) for i in indices])

    def _substitute(self, j: int, error: TFRecordError):
        """After item ``j`` failed with ``error``: report it (raises under
        on_error="raise"), then the next readable item stands in, and is
        remembered as the stand-in of every bad item passed over."""
        n = self._len
        self.policy.report(error)
        passed = [j]  # unreadable items passed over on the way to a readable one
        for _ in range(n - 1):
            j = self._stand_in.get((j + 1) % n, (j + 1) % n)  # a run of bad items found before: jump past it
            shard, r = self.locate(j)
            try:
                item = self._read(shard, r)
            except (CorruptRecordError, FeatureError) as e:
                self.policy.report(e)
                passed.append(j)
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
        path, index, spec = self.paths[shard], self.indexes[shard], self.spec
        planned = self._planned
        if planned[0] is not spec:  # the spec was replaced since
            planned = self._planned = _plan(spec)
        if planned[3]:
            item = self._read_compiled(path, index, r, spec, planned)
            if item is not None:
                return apply_transform(self.transform, item, path, index.item(r, 0), r)
        offset, size = index.item(r, 0), index.item(r, 1)
        data = self._readers.read(path, offset, size)
        try:
            return self._decode(data, path, offset, r)
        except CorruptRecordError as e:  # a stale index is raised, never replaced
            error = explain(e, index, self._readers.storage_options)
            if error is e:
                raise
            raise error from None

    def _compiled_items(self, targets: list[int]) -> list | None:
        """Items ``targets`` (checked indices) read in file order by the
        compiled reader: a list in the order asked, None where it left the
        record to the usual path; None altogether where it cannot read."""
        spec, planned = self.spec, self._planned
        if planned[0] is not spec:
            planned = self._planned = _plan(spec)
        if not planned[3] or any(map(is_url, self.paths)):
            return None
        out: list = [None] * len(targets)
        for pos in sorted(range(len(targets)), key=targets.__getitem__):
            j = targets[pos]
            shard = bisect.bisect_right(self._ends, j)
            item = self._read_compiled(self.paths[shard], self.indexes[shard], j - self._starts[shard], spec,
                                       planned)
            if item is not None:
                r = j - self._starts[shard]
                out[pos] = apply_transform(self.transform, item, self.paths[shard], self.indexes[shard].item(r, 0), r)
        return out

    def _read_compiled(self, path: str, index: np.ndarray, r: int, spec: Any, planned: tuple):
        """Record ``r`` read, checked and decoded by the compiled reader, for a
        local file and a record of the usual shape; None otherwise (then the
        usual path reads it, and raises the error that names it)."""
        fd = self._readers.descriptor(path)
        if fd is None:
            return None
        _, plan, owned, _ = planned
        if plan is not None:  # numbers only: the wanted features straight to tensors
            return read_item(fd, index, r, self.verify, plan, torch.from_numpy)
        parsed = read_example(fd, index.item(r, 0), index.item(r, 1), self.verify)
        if parsed is None or spec is None:
            return parsed
        try:
            return decode_owned(parsed, spec) if owned else decode(parsed, spec)
        except FeatureError:
            return None

    def _decode(self, frame: bytes, path: str, offset: int, r: int):
        payload = parse_frame(frame, name=path, offset=offset, record=r, verify=self.verify)
        return decode_payload(payload, path, offset, r, self.spec, self.transform, self._planned[2])

    def close(self) -> None:
        """Close the open shard files (they reopen on the next read)."""
        self._readers.close()


def _plan(spec) -> tuple:
    """(spec, its plan for the compiled reader or None, whether decoding may
    keep the parsed arrays, whether the compiled reader reads for it): what
    :meth:`IndexedTFRecordDataset._read` needs of a spec."""
    return (spec, item_plan(spec), isinstance(spec, dict) and reads_once(spec),
            compiled_reader() and not isinstance(spec, SequenceSpec))


def _compressed(path: str) -> TFRecordError:
    return TFRecordError(f"{path}: compressed shards cannot be read by index; use "
                         "TFRecordDataset to stream them, or `tfrecord-torch decompress`")
