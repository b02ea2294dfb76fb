"""A map-style dataset over indexed shards: random access by record number.

``ds[i]`` finds the shard by bisecting the shards' cumulative record counts
(a short Python list), reads the record with one positioned read through the
thread-safe reader pool and decodes it. ``ds.__getitems__(indices)`` (what
the DataLoader calls for a batch) reads the records of a batch in file order,
one read per run of adjacent records, and hands them back in the order asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from tfrecord_torch._args import check_flag, check_instance
from tfrecord_torch._types import PathLike, Paths
from tfrecord_torch.data import collating  # noqa: F401 - registers the items' collate in workers
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.fetch import ItemFetcher
from tfrecord_torch.data.options import Source
from tfrecord_torch.data.recordspec import record_spec
from tfrecord_torch.data.session import CacheArg, RemoteShards
from tfrecord_torch.data.shards import describe_shards, find_shards, index_argument, shard_indexes
from tfrecord_torch.data.spawncheck import user_callables, with_check, without_check
from tfrecord_torch.data.usage import check_positional
from tfrecord_torch.data.workersend import settle
from tfrecord_torch.data.workersetup import settle_worker
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.features.items import as_batch_head
from tfrecord_torch.features.payload import Payload
from tfrecord_torch.features.sequence import make_spec
from tfrecord_torch.io.shardcache import ShardCache
from tfrecord_torch.policy import OnError
from tfrecord_torch.records.compression import is_compressed

__all__ = ["IndexedTFRecordDataset"]


class IndexedTFRecordDataset(torch.utils.data.Dataset):
    """Records of many shards as one sequence, read by O(1) seeks.

    Works with any sampler (RandomSampler, DistributedSampler, ``random_split``).
    Files are opened lazily in each process that reads, never shared across
    a fork.

    Args:
        paths: a path, a glob pattern, a directory, or a list of these
            (uncompressed shards; compressed ones cannot be seeked). A
            directory whose shard names form several splits is a ValueError
            naming each split's glob.
        features: a feature spec (or TF ``feature_description``); None gives
            :func:`~tfrecord_torch.example.codec.parse_record` dicts (a SequenceExample's context features
            and feature lists side by side); with ``sequence_features``, the context's spec.
            ``Payload()``: each item is the record's payload (``bytes``);
            ``Payload(decode=json.loads)``: what the hook makes of it (a hook
            that raises: a bad record, under ``on_error``).
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
        storage_options: fsspec options for URLs (credentials, endpoint_url, ...).
        cache: node-local copies of remote shards: a shard is copied whole
            when a record of it is first read (by one process of the
            machine; the others wait for it), then read at disk speed, in
            later epochs too. "auto" (default): as :class:`~tfrecord_torch.Source`'s
            ``cache`` says (copies in the default folder when the remote
            shards fit, else range requests; ``TFRECORD_TORCH_SHARD_CACHE=off``
            turns it off), decided here once for every DataLoader worker. A
            :class:`~tfrecord_torch.io.shardcache.ShardCache`: copies where and
            as many as it says. None: each record is a range request.
        source: the same options as one :class:`~tfrecord_torch.Source`, as
            ``TFRecordDataset`` takes them (``index``, ``verify``, ``cache``
            and ``progress``; its shards are uncompressed and indexed, so
            ``compression`` may be "auto" or None and ``index`` not False).
            Give either ``source`` or those keywords.
    """

    def __new__(cls, *args, **kwargs):
        check_positional(cls.__name__, args)  # before Python's "takes 2 positional arguments"
        return super().__new__(cls)

    def __init__(self, paths: Paths, *, features: dict | Payload | None = None,
                 sequence_features: dict | None = None,
                 index: Sequence[PathLike] | str | None = None,
                 transform: Callable | None = None, verify: bool = True, on_error: OnError = "raise",
                 storage_options: dict | None = None, cache: CacheArg = "auto",
                 source: Source | None = None) -> None:
        progress, budget = None, None
        if source is not None:
            index, verify, cache, progress = _from_source(source, index=index, verify=verify, cache=cache)
            budget = source.read_budget
        check_flag("verify", verify)
        if cache is not None and not (isinstance(cache, str) and cache == "auto"):
            check_instance("cache", cache, ShardCache, 'a ShardCache (ShardCache(directory=..., limit=...)), '
                                                       '"auto" or None')
        spec = make_spec(features, sequence_features)
        listing = find_shards(paths, storage_options)
        self.paths = listing.files
        self.policy = SharedErrorPolicy(on_error, self.paths)
        index, save = index_argument(index, len(self.paths))
        if index is not None:
            for p in self.paths:
                if is_compressed(p, "auto", storage_options):
                    raise _compressed(p)
        remote = RemoteShards.of(cache, listing, storage_options, shuffled=True,  # a sampler may ask for any record
                                 budget=budget)
        indexes = shard_indexes(listing, index=index, save=save, report=self.policy.reporter(),
                                storage_options=storage_options, copies=remote.fresh_copies(), progress=progress)
        for p, i in zip(self.paths, indexes):
            if i is None:
                raise _compressed(p)
        self._fetcher = ItemFetcher(paths=self.paths, indexes=[i for i in indexes if i is not None],
                                    spec=spec, transform=transform,
                                    verify=verify, policy=self.policy, remote=remote)
        self.indexes: list[np.ndarray] = self._fetcher.indexes
        self.ends = self._fetcher.ends
        self.verify = verify

    @property
    def spec(self) -> Any:
        """The feature spec; may be replaced (the reader plans for it afresh)."""
        return self._fetcher.spec

    @spec.setter
    def spec(self, spec: Any) -> None:
        self._fetcher.spec = spec

    @property
    def transform(self) -> Callable | None:
        """The transform applied to each item; may be replaced."""
        return self._fetcher.transform

    @transform.setter
    def transform(self, transform: Callable | None) -> None:
        self._fetcher.transform = transform

    def __getstate__(self) -> dict:  # spawned DataLoader workers: say which callable does not pickle
        return with_check(type(self).__name__, self.__dict__,
                          user_callables(self.transform, record_spec(self.spec).hooks(), self.policy.on_error))

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(without_check(state))

    def __len__(self) -> int:
        return self._fetcher.length

    def __repr__(self) -> str:
        features = record_spec(self.spec).shown()
        return f"{type(self).__name__}({describe_shards(self.paths)}, {len(self):,} records, features={features})"

    def locate(self, i: int) -> tuple[int, int]:
        """(shard number, record number in the shard) of item ``i``."""
        return self._fetcher.locate(i)

    def __getitem__(self, i: int):
        """The decoded record ``i`` (a bad one replaced under ``on_error``: see the class)."""
        settle_worker()
        settle()  # in a worker, after a batch went out: the queue's feeder thread first (workersend)
        return self._fetcher.item(i)

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The decoded records ``indices``, in that order: what ``ds[i]`` gives
        for each, read in one pass in file order (by the compiled reader one
        record at a time where it can, else one positioned read per run of
        adjacent records) and decoded once per index asked (images on
        threads of this call where the process has cores to spare), then the
        transform applied index by index in the order asked. The DataLoader
        calls this for a batch. Every index is checked (IndexError) before
        anything is read; a bad record is replaced as ``ds[i]`` replaces it.
        """
        settle_worker()
        settle()
        fetcher = self._fetcher
        checked = [fetcher.check(i) for i in indices]
        out = fetcher.items(checked)
        if out and type(out[0]) is dict:  # default_collate names the records of values that do not stack
            out[0] = as_batch_head(out[0], lambda k: fetcher.location(checked[k]))
        return out

    def errors(self) -> dict:
        """Records replaced under ``on_error="skip"/"warn"`` so far, over all
        worker processes: ``{"total": n, "per_shard": {path: n}}``."""
        return self.policy.summary()

    def close(self) -> None:
        """Close the open shard files (they reopen on the next read)."""
        self._fetcher.close()


def _compressed(path: str) -> TFRecordError:
    return TFRecordError(f"{path}: compressed shards cannot be read by index; use "
                         "TFRecordDataset to stream them, or `tfrecord-torch decompress`")


def _from_source(source: Source, *, index: Any, verify: bool, cache: CacheArg) -> tuple[Any, bool, CacheArg, bool | None]:
    """(index, verify, cache, progress) of ``source``, checked for a map-style read;
    a keyword given beside it is an error (one place says each option)."""
    check_instance("source", source, Source, "a Source (source=Source(index=..., cache=...))")
    given = [name for name, value, default in (("index", index, None), ("verify", verify, True), ("cache", cache, "auto"))
             if value != default]
    if given:
        raise ValueError(f"IndexedTFRecordDataset() takes {', '.join(given)} in its source= or as keywords, not both: "
                         f"move {given[0]}= into Source(...)")
    if source.index is False:
        raise ValueError("IndexedTFRecordDataset() reads records by their index: Source(index=False) (streamed "
                         "shards) is TFRecordDataset's; leave index=None, 'beside' or a list of index paths")
    if source.compression not in ("auto", None):
        raise ValueError(f"IndexedTFRecordDataset() cannot seek in compressed shards (Source(compression="
                         f"{source.compression!r})): read them with TFRecordDataset, or decompress them")
    if source.lengths is not None:
        raise ValueError("IndexedTFRecordDataset() indexes every shard when it is made, so Source(lengths=...) "
                         "has nothing to save: leave it out (TFRecordDataset uses it)")
    index = list(source.index) if isinstance(source.index, tuple) else source.index
    return index, source.verify, source.cache, source.progress
