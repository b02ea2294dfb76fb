"""The Dataset classes: thin compositions of sharding, reading and features."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np
import torch.utils.data

from tfrecord_torch._types import Paths
from tfrecord_torch.data import collating, elastic, plan  # noqa: F401 - collating registers the items' collate
from tfrecord_torch.data.batchmode import BatchDecoding, BatchPipeline
from tfrecord_torch.data.buffers import chunked, shuffle_buffer
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.decodeahead import RecordDecoder
from tfrecord_torch.data.describe import Shown, dataset_repr, reader_where
from tfrecord_torch.data.firstepoch import FirstEpoch, saved_epoch
from tfrecord_torch.data.iteration import Reader, ShardReads, Share, batch_count, this_reader
from tfrecord_torch.data.options import Batching, Sharding, Shuffling, Source, dataset_options
from tfrecord_torch.data.recordmode import indexed_records, record_groups
from tfrecord_torch.data.recordspec import FusedPerSample, PerSample, record_spec
from tfrecord_torch.data.session import RemoteShards
from tfrecord_torch.data.shards import LazyIndexes, check_lengths, find_shards, shard_indexes
from tfrecord_torch.data.spawncheck import user_callables, with_check, without_check
from tfrecord_torch.data.state import ResumeState, describe_shards_for_state
from tfrecord_torch.data.streamed import check_streamed, closing, dealt_shards, decoded, open_streamed
from tfrecord_torch.data.usage import check_call, no_random_access
from tfrecord_torch.data.workersetup import settle_worker
from tfrecord_torch.features.payload import Payload
from tfrecord_torch.features.sequence import make_spec
from tfrecord_torch.policy import OnError

__all__ = ["TFRecordDataset"]


class TFRecordDataset(torch.utils.data.IterableDataset):
    """Records from TFRecord shards, split over DataLoader workers and ranks.

    It owns its collaborators: a :class:`~tfrecord_torch.data.state.ResumeState`
    (epoch and position, for ``state_dict``), and in batch mode a
    :class:`~tfrecord_torch.data.batchmode.BatchPipeline` per iteration.

    Args:
        paths: a path, a glob pattern, a directory, or a list of these. A
            directory whose shard names form several splits (``train-*``
            beside ``validation-*``) is a ValueError naming each split's glob.
        features: a feature spec (``{"image": Image(), "label": Int64()}``,
            or a preset, or a TF ``feature_description``); None yields the
            dicts :func:`~tfrecord_torch.example.codec.parse_record` returns (a SequenceExample's context
            features and feature lists side by side). With ``sequence_features``,
            the spec of the SequenceExamples' context (may be None).
            ``Payload()`` reads records that are not Examples: each item is
            the record's payload (``bytes``), or ``Payload(decode=json.loads)``
            what the hook makes of it (a hook that raises: a bad record,
            under ``on_error``); batches are lists of items.
        sequence_features: read SequenceExamples: a spec of their feature
            lists, each feature's shape being one step's (``Int64("tokens")``
            gives int64 [T], ``Float("frames", shape=(3,))`` float32 [T, 3]).
        transform: a callable applied to each item; in batch mode, to each
            batch -- except a torchvision v2 transform, which is applied to
            each record (each image its own random crop and flip).
        shuffle: a global shuffle: True, or a :class:`Shuffling` saying how
            (block, buffer, cycle_length). Indexed shards are read in a
            permutation of all (shard, record) pairs, new every epoch; streamed
            shards are dealt in a shuffled order, ``cycle_length`` of them
            interleaved, through a shuffle buffer. Deterministic in ``seed`` and
            the epoch: each iteration starts the next epoch (also with
            ``persistent_workers=True``) unless :meth:`set_epoch` names one.
        seed: the shuffle seed (same on every rank).
        batch_size: decode whole batches at once (use ``DataLoader(batch_size=None)``):
            items are then dicts of batched tensors [B, ...] (with ``Payload``,
            lists of B payloads or decoded values). With indexed shards,
            batches are dealt to workers in turn, so their order does not depend
            on ``num_workers``; streamed shards are batched per worker.
        on_error: "raise", "skip", "warn" or a callable (see :mod:`tfrecord_torch.policy`): what a corrupt record or a feature
            that fails to decode does (:mod:`tfrecord_torch.policy`); skips are
            logged and counted in :meth:`errors`, across worker processes.
        storage_options: fsspec options for URLs (credentials, endpoint_url, ...).
        sharding: a :class:`Sharding`: rank, world_size (default torch.distributed,
            then the RANK / WORLD_SIZE environment, then (0, 1)) and ``even``.
        source: a :class:`Source`: index files, known shard lengths,
            compression, CRC checks, the indexing progress bar, and the
            node-local cache of remote shards (on by default when they fit:
            :class:`Source`'s ``cache``).
        batching: a :class:`Batching`: ``drop_last`` in batch mode, and
            ``images``, the image fast path's options.

    Every record is read exactly once per epoch over all ranks and workers.
    Shards that cannot be indexed (compressed) are streamed and dealt whole;
    so are, in epoch 0 only, remote shards without index objects, indexed as
    they are read (:mod:`~tfrecord_torch.data.firstepoch`).
    """

    def __new__(cls, *args, **kwargs):
        check_call(cls.__name__, args, kwargs)  # before Python's "takes 2 positional arguments"
        return super().__new__(cls)

    def __init__(self, paths: Paths, *, features: dict | Payload | None = None,
                 sequence_features: dict | None = None,
                 transform: Callable | None = None, shuffle: bool | Shuffling = False, seed: int = 0,
                 batch_size: int | None = None, on_error: OnError = "raise", storage_options: dict | None = None,
                 sharding: Sharding | None = None, source: Source | None = None,
                 batching: Batching | None = None) -> None:
        super().__init__()
        shuffling, sharding, source, batching = dataset_options(batch_size=batch_size, shuffle=shuffle,
                                                                sharding=sharding, source=source, batching=batching)
        self.spec = make_spec(features, sequence_features)
        record_spec(self.spec).check_images(batching.images)
        self.storage_options = storage_options
        listing = find_shards(paths, storage_options)
        self.paths = listing.files
        self.rank, self.world_size = plan.resolve_rank(sharding.rank, sharding.world_size)
        even = sharding.even
        self.shuffle, self.seed, self.even = shuffle is not False, seed, even
        self.shuffle_block, self.cycle_length = shuffling.block, shuffling.cycle_length
        self.transform, self.batch_size, self.drop_last = transform, batch_size, batching.drop_last
        self.images, self.prefetch = batching.image_options, batching.prefetch
        self._fused = FusedPerSample()  # what the per-sample path decodes with
        self.compression, self.verify = source.compression, source.verify
        self.policy = SharedErrorPolicy(on_error, self.paths)
        self.progress = source.progress
        self._lengths = check_lengths(source.lengths, self.paths)
        self._indexes = LazyIndexes(listing, source.index, self._lengths, FirstEpoch.of(  # epoch 0 streams...
            listing, source, ranks_fit=even is None and len(self.paths) >= self.world_size))  # ...unindexed remote shards
        self.remote = RemoteShards.of(source.cache, listing, storage_options, shuffled=self.shuffle,
                                      budget=source.read_budget)
        self._shuffling, self._resume = shuffling, ResumeState(type(self).__name__)
        if self.streamed:
            check_streamed(len(self.paths), self.world_size, even, source.index is False)

    def __getstate__(self) -> dict:  # spawned DataLoader workers: say which callable does not pickle
        return with_check(type(self).__name__, self.__dict__,
                          user_callables(self.transform, record_spec(self.spec).hooks(), self.policy.on_error))

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(without_check(state))

    @property
    def indexes(self) -> list:
        """Each shard's index (None: streamed). With ``lengths=`` the shards
        are indexed when something first needs their offsets, not before."""
        return self._indexes.get(self._build_indexes, self.epoch)

    def _build_indexes(self, listing, index: list | None, save) -> list:
        return shard_indexes(listing, compression=self.compression, index=index, save=save,
                             progress=self.progress, report=self.policy.reporter(),
                             storage_options=self.storage_options, copies=self.remote.fresh_copies())

    @property
    def counts(self) -> list[int] | None:
        """Records per shard (None if some shard is streamed); from ``lengths=``
        when given, without reading the shards."""
        return self._indexes.counts(self._build_indexes, self.epoch)

    @property
    def streamed(self) -> bool:
        """Whether this epoch deals shards whole (compressed ones; in epoch 0,
        remote ones without index objects: :mod:`~tfrecord_torch.data.firstepoch`)."""
        return self.counts is None

    @property
    def shuffle_buffer(self) -> int:
        """The shuffle buffer's size (``Shuffling(buffer=)``; unset: 10,000 when streaming, else 0)."""
        return self._shuffling.size(self.streamed)

    @property
    def epoch(self) -> int:
        """The epoch of this reader's current (or next) iteration (its DataLoader workers' latest one)."""
        return self._resume.current

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read ``epoch`` (and later ones ``epoch + 1``, ...).

        Not needed to reshuffle: each iteration already starts the next epoch.
        Call it before ``iter(loader)``; it reaches persistent workers too.
        """
        self._resume.set_epoch(epoch)
        self._indexes.enter(self._build_indexes, epoch)  # here, once, not in each DataLoader worker

    def state_dict(self) -> dict:
        """Where iteration stands: the epoch, this reader's position in it, and
        the settings that give the position its meaning (format version, seed,
        shards with record counts, rank, world size, worker, shuffle, mode).

        The position counts the units (records, or batches in batch mode) this
        reader has finished, delivered or skipped by the error policy. Inside a
        DataLoader worker this is the worker's own state, which is what
        torchdata's StatefulDataLoader saves and restores per worker. After
        :meth:`load_state_dict` and before iterating, it is the loaded state.

        Raises:
            RuntimeError: called in the main process while a plain DataLoader's
                workers read the dataset (use StatefulDataLoader's state_dict).
        """
        return self._resume.state_dict(self._settings(self.counts))

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next iteration reads the saved epoch from after the saved
        position (no :meth:`set_epoch` needed); nothing is repeated or skipped,
        and what came before is not read again (streamed shards are re-read but
        not decoded). Later iterations go on with the following epochs.

        The state may come from another layout: another rank, world size,
        number of DataLoader workers, batch size or ``even`` mode (a job
        restarted on other GPUs). Pass the state of any one rank -- the
        dataset's, or the whole ``state_dict()`` of a torchdata
        StatefulDataLoader, which holds every worker's -- on every new rank,
        then build the loader with the new ``num_workers``. The job that saved
        it stepped its ranks in lockstep, so that rank's state tells what all
        ranks read; the new ranks and workers share the rest of the epoch, each
        record once.

        Raises:
            ValueError: the state comes from another seed, shard list or
                shuffle setting (named), or another format version; or from
                another layout with compressed shards, a block shuffle, a
                shuffle buffer, ``even="pad"``, or one DataLoader worker's
                state only (saying what to do); or, when iterating, it was
                loaded in another reader than the one iterating and cannot
                be carried to it.
        """
        epoch = saved_epoch(state, type(self).__name__)  # its mode: epoch 0 may stream what later ones index
        counts = self._indexes.counts(self._build_indexes, self.epoch if epoch is None else epoch)
        self._resume.load_state_dict(state, self._settings(counts), sum(counts or ()))

    def _settings(self, counts: list[int] | None) -> dict:
        """What gives a position its meaning (see :func:`~tfrecord_torch.data.state.check_state`),
        in an epoch of ``counts`` records per shard."""
        return {"seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "worker": this_reader(),
                "shards": describe_shards_for_state(self.paths, counts),
                "shuffle": {"shuffle": self.shuffle, "block": self.shuffle_block,
                            "buffer": self._shuffling.size(counts is None), "cycle_length": self.cycle_length},
                "mode": {"batch_size": self.batch_size, "drop_last": self.drop_last, "even": self.even}}

    def errors(self) -> dict:
        """Records skipped under ``on_error="skip"/"warn"`` so far, over all
        worker processes: ``{"total": n, "per_shard": {path: n}}``."""
        return self.policy.summary()

    def __repr__(self) -> str:
        return dataset_repr(self._shown(), self.paths, None if self.streamed else self.counts,
                            record_spec(self.spec).shown())

    def _shown(self) -> Shown:
        return Shown(type(self).__name__, self.epoch, self.rank, self.world_size, self.shuffle, self.seed,
                     self.batch_size)

    def __getitem__(self, i):
        raise no_random_access(type(self).__name__)

    def __len__(self) -> int:
        """Items this rank yields per epoch: records, or batches in batch mode."""
        if self.streamed:
            raise TypeError(self._indexes.unknown_length(self._build_indexes, self.epoch))
        lo, hi = plan.rank_positions(sum(self.counts or ()), self.rank, self.world_size, self.even)
        return hi - lo if self.batch_size is None else batch_count(hi - lo, self.batch_size, self.drop_last)

    # --- iteration -----------------------------------------------------------

    def __iter__(self) -> Iterator:
        settle_worker()
        worker, workers = this_reader()
        skip = self._resume.start([worker, workers])
        self.policy.begin()  # before the first read: its skips are this iteration's
        if self.streamed:
            units = self._streamed(worker, workers, skip)
        elif self.batch_size is not None:
            units = self._batches(worker, workers, skip)
        else:
            units = self._records(worker, workers, skip)
            next(units)  # the first read begins now: a DataLoader worker is here before its first index comes
        return self._resume.deliver(units, self.policy, records=self.batch_size is None,
                                    where=reader_where(self._shown(), worker, workers))

    def _mixed(self, items, worker: int, workers: int):
        """Apply the shuffle buffer (on references or undecoded payloads)."""
        rng = np.random.default_rng([self.seed, self.epoch, self.rank * workers + worker, 1])
        return shuffle_buffer(items, self.shuffle_buffer if self.shuffle else 0, rng)

    def _pipeline(self) -> BatchPipeline:
        """Batch mode's pipeline for one iteration, from the settings as they stand."""
        decoding = BatchDecoding(record_spec(self.spec), self.transform, self.images,
                                 (self.seed, self.epoch, self.rank), self.prefetch)
        return BatchPipeline(self._reads(), decoding, self.policy)

    def _sequence(self, worker: int, workers: int) -> Share:
        """The epoch's plan and this rank's [lo, hi) in it (this reader's in
        record mode). An epoch resumed under another layout plans only the
        positions its predecessor left (``ResumeState.consumed``)."""
        total = sum(self.counts or ())
        consumed = self._resume.consumed
        left = elastic.remaining(consumed, total) if consumed else None
        lo, hi = plan.rank_positions(total if left is None else len(left), self.rank, self.world_size, self.even)
        if self.batch_size is None:
            lo, hi = plan.split_range(lo, hi, worker, workers)
        part = {"block": self.shuffle_block, "scope": (lo, hi)} if left is None else {"remaining": left}
        return Share(plan.RangePlanner(self.counts or [], shuffle=self.shuffle, seed=self.seed, epoch=self.epoch,
                                       **part), lo, hi)

    def _batches(self, worker: int, workers: int, skip: int):
        """Batch mode over indexed shards. Batch b holds positions [b*B, (b+1)*B)
        of this rank's sequence; worker w decodes batches w, w + workers, ...
        (after ``skip`` of its own)."""
        size = cast(int, self.batch_size)
        share = self._sequence(worker, workers)
        count = batch_count(share.hi - share.lo, size, self.drop_last)
        return self._pipeline().batches(share, size, count, Reader(worker, workers, skip))

    def _reads(self) -> ShardReads:
        """The shards this iteration reads, and how their bytes are reached."""
        return ShardReads(self.paths, self.indexes, self.remote, self.verify, self.shuffle)

    def _records(self, worker: int, workers: int, skip: int):
        """Record mode over indexed shards (:func:`~tfrecord_torch.data.recordmode.indexed_records`):
        the first value is None, once the first read has begun; then the
        (position, record) pairs."""
        share = self._sequence(worker, workers)
        shuffled = self.shuffle and self.shuffle_buffer > 1
        mix = functools.partial(self._mixed, worker=worker, workers=workers) if shuffled else None
        groups = record_groups(self._reads(), share, self.shuffle_block, mix)
        return indexed_records(self._reads(), share, Reader(worker, workers, skip), groups, self._decoder(),
                               self.policy.reporter())

    def _streamed(self, worker: int, workers: int, skip: int):
        """Streamed (compressed) shards, dealt whole; the first ``skip`` units
        are read again but not decoded."""
        shards = dealt_shards(self._shown(), len(self.paths), Reader(worker, workers, skip), self._indexes)
        opened = open_streamed(self._reads(), shards, report=self.policy.reporter(), compression=self.compression,
                               cycle_length=self.cycle_length if self.shuffle else 1,
                               indexing=self._indexes.indexing)
        units = self._mixed(opened.located, worker, workers)
        if self.batch_size is not None:
            out = self._pipeline().streamed_batches(chunked(units, self.batch_size, self.drop_last), skip,
                                                    (worker,))
        else:
            out = decoded(units, skip, self._decoder())
        return closing(out, opened)

    def _decoder(self) -> RecordDecoder:
        """How this iteration decodes its records (on decode threads, where worth it)."""
        return RecordDecoder(self._per_sample, self.policy.reporter(), self.images.threads if self.images else None)

    def _per_sample(self) -> PerSample:
        """The record kind and transform the per-sample path decodes with (a fusable head of
        the transform done while decoding), worked out again if a setting is reassigned."""
        return self._fused.of(self.spec, self.transform, self.images)

