"""The Dataset classes: thin compositions of sharding, reading and features."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

import numpy as np
import torch.utils.data

from tfrecord_torch._args import check_flag, check_instance, check_int
from tfrecord_torch._types import Paths
from tfrecord_torch.data import (
    collating,  # noqa: F401 - registers the items' collate in workers
    elastic,
    plan,
)
from tfrecord_torch.data.batchmode import BatchPipeline
from tfrecord_torch.data.buffers import chunked, columns, shuffle_buffer
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.firstepoch import FirstEpoch, saved_epoch
from tfrecord_torch.data.imagebatch import fuse_per_sample
from tfrecord_torch.data.options import MOVED, Batching, Sharding, Shuffling, Source, refuse_moved_keywords
from tfrecord_torch.data.readahead import fetch_ahead
from tfrecord_torch.data.reading import (
    SKIPPED,
    Located,
    decode_or_skip,
    fetch_scattered,
    interleave,
    stream_shard,
)
from tfrecord_torch.data.session import ReadSession, RemoteShards, Scatter
from tfrecord_torch.data.shards import describe_shards, find_shards, index_argument, shard_indexes
from tfrecord_torch.data.spawncheck import user_callables, with_check, without_check
from tfrecord_torch.data.state import ResumeState, describe_shards_for_state
from tfrecord_torch.data.usage import check_positional, no_flat_cache, no_random_access
from tfrecord_torch.data.workersetup import settle_worker
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.features.images.engine import ImageBatching
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
        check_positional(cls.__name__, args)  # before Python's "takes 2 positional arguments"
        if "cache" in kwargs:  # IndexedTFRecordDataset's flat keyword, before Python's "unexpected keyword"
            raise no_flat_cache(cls.__name__, kwargs["cache"])
        refuse_moved_keywords(cls.__name__, {k: v for k, v in kwargs.items() if k in MOVED})
        return super().__new__(cls)

    def __init__(self, paths: Paths, *, features: dict | Payload | None = None,
                 sequence_features: dict | None = None,
                 transform: Callable | None = None, shuffle: bool | Shuffling = False, seed: int = 0,
                 batch_size: int | None = None, on_error: OnError = "raise", storage_options: dict | None = None,
                 sharding: Sharding | None = None, source: Source | None = None,
                 batching: Batching | None = None) -> None:
        super().__init__()
        check_int("batch_size", batch_size, minimum=1, optional=True)
        shuffling = Shuffling() if not isinstance(shuffle, Shuffling) else shuffle
        if not isinstance(shuffle, Shuffling):
            check_flag("shuffle", shuffle)
        sharding = check_instance("sharding", sharding or Sharding(), Sharding, "a Sharding")
        source = check_instance("source", source or Source(), Source, "a Source")
        batching = check_instance("batching", batching or Batching(), Batching, "a Batching")
        self.spec = make_spec(features, sequence_features)
        if isinstance(self.spec, Payload) and isinstance(batching.images, ImageBatching):
            raise ValueError(f"batching=Batching(images=ImageBatching(...)) sets how Image features decode, "
                             f"but features={self.spec!r} reads each record's payload as it is, with no "
                             "images to decode; leave images= out (or decode the images in the hook)")
        self.storage_options = storage_options
        listing = find_shards(paths, storage_options)
        self.paths = listing.files
        self.rank, self.world_size = plan.resolve_rank(sharding.rank, sharding.world_size)
        even = sharding.even
        self.shuffle, self.seed, self.even = shuffle is not False, seed, even
        self.shuffle_block, self.cycle_length = shuffling.block, shuffling.cycle_length
        self.transform, self.batch_size, self.drop_last = transform, batch_size, batching.drop_last
        self.images, self.prefetch = batching.image_options, batching.prefetch
        self._fused: tuple[_Settings, PerSample] | None = None  # what the per-sample path decodes with
        self.compression, self.verify = source.compression, source.verify
        self.policy = SharedErrorPolicy(on_error, self.paths)
        self.progress = source.progress
        self._lengths = self._check_lengths(source.lengths)
        self._index_args = _IndexArgs(source.index, listing)
        self.remote = RemoteShards.of(source.cache, listing, storage_options, shuffled=self.shuffle)
        # firstepoch: remote shards without index objects are streamed in epoch 0, not downloaded to index
        self._first = FirstEpoch.of(listing, compression=source.compression, enabled=source.index is None
                                    and source.lengths is None and even is None and len(self.paths) >= self.world_size)
        self._indexes_built: list | None = None
        self._index_lock = threading.Lock()
        self.streamed = False if self._lengths is not None else any(i is None for i in self.indexes)
        if self.streamed and even is not None:
            raise ValueError("even='pad'/'drop' needs record counts, but some shards are compressed "
                             "(cannot be indexed); decompress them or use even=None")
        if self.streamed and len(self.paths) < self.world_size:
            raise ValueError(_idle_ranks(len(self.paths), self.world_size, None, source.index is False))
        self._buffer = shuffling.buffer
        self.shuffle_buffer = (10_000 if self.streamed else 0) if self._buffer is None else self._buffer
        self._resume = ResumeState(type(self).__name__)

    def __getstate__(self) -> dict:  # a lock does not pickle (spawned DataLoader workers)
        state = with_check(type(self).__name__, self.__dict__,
                           user_callables(self.transform, self.spec, self.policy.on_error))
        state["_index_lock"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(without_check(state))
        self._index_lock = threading.Lock()

    def _check_lengths(self, lengths) -> list[int] | None:
        if lengths is None:
            return None
        if len(lengths) != len(self.paths):
            raise ValueError(f"lengths: got {len(lengths)} record counts for {len(self.paths)} shards "
                             "(one count >= 0 per shard)")
        return list(lengths)

    @property
    def indexes(self) -> list:
        """Each shard's index (None: streamed). With ``lengths=`` the shards
        are indexed when something first needs their offsets, not before."""
        if self._indexes_built is None:
            with self._index_lock:
                if self._indexes_built is None:
                    self._indexes_built = self._build_indexes(self._index_args.index, self._index_args.listing)
        return self._indexes_built

    def _build_indexes(self, index, listing) -> list:
        if index is False:
            return [None] * len(self.paths)
        index, save = index_argument(index, len(self.paths))
        built = self._first.open(listing, functools.partial(self._open_indexes, index=index, save=save))
        for path, found, expected in zip(self.paths, built, self._lengths or ()):
            if found is None:
                raise TFRecordError(f"{path}: a compressed shard cannot be read by position, but "
                                    f"lengths= gave its record count ({expected})")
            if len(found) != expected:
                raise TFRecordError(f"{path}: lengths= (dataset_info.json's shardLengths for a TFDS "
                                    f"folder) says {expected} records, but the shard holds {len(found)}")
        return built

    def _open_indexes(self, listing, *, index=None, save="cache") -> list:
        return shard_indexes(listing, compression=self.compression, index=index, save=save,
                             progress=self.progress, report=self.policy.reporter(),
                             storage_options=self.storage_options, copies=self.remote.fresh_copies())

    def _enter_epoch(self, epoch: int) -> None:
        """firstepoch: the indexes and mode ``epoch`` reads by (shards left unindexed are streamed in epoch 0)."""
        if self._first.deferred:
            self._indexes_built = self._first.indexes_for(epoch, self.indexes, self._open_indexes)
            self.streamed = any(i is None for i in self._indexes_built)
            self.shuffle_buffer = (10_000 if self.streamed else 0) if self._buffer is None else self._buffer

    @property
    def counts(self) -> list[int] | None:
        """Records per shard (None if some shard is streamed); from ``lengths=``
        when given, without reading the shards."""
        if self._lengths is not None and self._indexes_built is None:
            return list(self._lengths)
        return None if self.streamed else [len(i) for i in self.indexes]

    @property
    def epoch(self) -> int:
        """The epoch of this reader's current (or next) iteration."""
        return self._resume.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read ``epoch`` (and later ones ``epoch + 1``, ...).

        Not needed to reshuffle: each iteration already starts the next epoch.
        Call it before ``iter(loader)``; it reaches persistent workers too.
        """
        self._resume.set_epoch(epoch)
        self._enter_epoch(epoch)  # firstepoch: shards the index cache lacks are indexed here, once, not per worker

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
        return self._resume.state_dict(self._settings())

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
        self._enter_epoch(saved_epoch(state, type(self).__name__) or 0)  # firstepoch: the state's epoch's mode
        self._resume.load_state_dict(state, self._settings(), sum(self.counts or ()))

    def _settings(self) -> dict:
        """What gives a position its meaning (see :func:`~tfrecord_torch.data.state.check_state`)."""
        return {"seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "worker": _reader(),
                "shards": describe_shards_for_state(self.paths, self.counts),
                "shuffle": {"shuffle": self.shuffle, "block": self.shuffle_block,
                            "buffer": self.shuffle_buffer, "cycle_length": self.cycle_length},
                "mode": {"batch_size": self.batch_size, "drop_last": self.drop_last, "even": self.even}}

    def errors(self) -> dict:
        """Records skipped under ``on_error="skip"/"warn"`` so far, over all
        worker processes: ``{"total": n, "per_shard": {path: n}}``."""
        return self.policy.summary()

    def __repr__(self) -> str:
        records = "streamed" if self.streamed else f"{sum(self.counts or ()):,} records"
        spec = self.spec
        features = spec if isinstance(spec, Payload) else sorted(spec) if spec is not None else None
        parts = [describe_shards(self.paths), records, f"features={features}"]
        if self.shuffle:
            parts.append(f"shuffle=True, seed={self.seed}, epoch={self.epoch}")
        if self.batch_size is not None:
            parts.append(f"batch_size={self.batch_size}")
        if self.world_size > 1:
            parts.append(f"rank={self.rank}/{self.world_size}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __getitem__(self, i):
        raise no_random_access(type(self).__name__)

    def __len__(self) -> int:
        """Items this rank yields per epoch: records, or batches in batch mode."""
        self._enter_epoch(self.epoch)  # firstepoch
        if self.streamed:
            raise TypeError(self._unknown_length())
        lo, hi = plan.rank_positions(sum(self.counts or ()), self.rank, self.world_size, self.even)
        n = hi - lo
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _unknown_length(self) -> str:
        if self._first.streams(self.epoch):  # firstepoch
            return self._first.unknown_length()
        if self._index_args.index is False:
            return ("len() is unknown: Source(index=False) streams every shard, so no record is counted "
                    "before it is read; leave index= out to index (and count) the uncompressed shards")
        streamed = [p for p, i in zip(self.paths, self.indexes) if i is None]
        shown = streamed if len(streamed) <= 3 else [*streamed[:2], "..."]
        files = " ".join(streamed) if len(streamed) <= 3 else "FILES"
        return (f"len() is unknown: {len(streamed)} of {len(self.paths)} shards "
                f"{'is' if len(streamed) == 1 else 'are'} compressed ({', '.join(shown)}), and a compressed "
                "shard is streamed, not indexed, so its records are not counted before they are read. Count "
                f"them with `tfrecord-torch verify {files}` (it reads each file once and prints its record "
                "count); or decompress the shards once (`tfrecord-torch decompress IN OUT`) and read the "
                "uncompressed copies, which are indexed and counted")

    # --- iteration -----------------------------------------------------------

    def __iter__(self) -> Iterator:
        settle_worker()
        worker, workers = _reader()
        skip = self._resume.start([worker, workers])
        self._enter_epoch(self.epoch)  # firstepoch: epoch 0 streams shards left unindexed, later epochs index them
        self.policy.begin()  # before the first read: its skips are this iteration's
        if self.streamed:
            units = self._streamed(worker, workers, skip)
        elif self.batch_size is not None:
            units = self._batches(worker, workers, skip)
        else:
            units = self._records(worker, workers, skip)
            next(units)  # the first read begins now: a DataLoader worker is here before its first index comes
        return self._deliver(units, self._where(worker, workers))

    def _deliver(self, units, where: str) -> Iterator:
        records = self.batch_size is None and not self.policy.raises  # batch mode counts in its pipeline
        policy = self.policy
        for position, value in units:  # (units finished so far, the value or SKIPPED)
            self._resume.position = position
            if value is not SKIPPED:
                if records:
                    policy.delivered()
                yield value
        policy.end(where)  # a spec error skipped in every record raises; else one line if any was skipped

    def _where(self, worker: int, workers: int) -> str:
        """This reader, for the line an epoch with skips logs."""
        parts = [f"rank {self.rank} of {self.world_size}"] if self.world_size > 1 else []
        if workers > 1 or torch.utils.data.get_worker_info() is not None:
            parts.append(f"DataLoader worker {worker} of {workers}")
        return f"{type(self).__name__} epoch {self.epoch}" + (f" ({', '.join(parts)})" if parts else "")

    def _rng(self, worker: int, workers: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, self.rank * workers + worker, 1])

    def _mixed(self, items, worker: int, workers: int):
        """Apply the shuffle buffer (on references or undecoded payloads)."""
        return shuffle_buffer(items, self.shuffle_buffer if self.shuffle else 0, self._rng(worker, workers))

    def _planner(self, scope: tuple[int, int]) -> plan.RangePlanner:
        """The epoch's plan for a reader owning positions ``scope``."""
        return plan.RangePlanner(self.counts or [], shuffle=self.shuffle, seed=self.seed, epoch=self.epoch,
                                 block=self.shuffle_block, scope=scope)

    def _pipeline(self) -> BatchPipeline:
        """Batch mode's pipeline for one iteration, from the settings as they stand."""
        return BatchPipeline(paths=self.paths, indexes=self.indexes, spec=self.spec, transform=self.transform,
                             images=self.images, shuffle=self.shuffle, seed_key=(self.seed, self.epoch, self.rank),
                             policy=self.policy, verify=self.verify, prefetch=self.prefetch, remote=self.remote)

    def _sequence(self, worker: int, workers: int) -> tuple[plan.RangePlanner, int, int]:
        """The epoch's plan and this rank's [lo, hi) in it (this reader's in
        record mode). An epoch resumed under another layout plans only the
        positions its predecessor left (``ResumeState.consumed``)."""
        total = sum(self.counts or ())
        consumed = self._resume.consumed
        left = elastic.remaining(consumed, total) if consumed else None
        lo, hi = plan.rank_positions(total if left is None else len(left), self.rank, self.world_size, self.even)
        if self.batch_size is None:
            lo, hi = plan.split_range(lo, hi, worker, workers)
        if left is None:
            return self._planner((lo, hi)), lo, hi
        return plan.RangePlanner(self.counts or [], shuffle=self.shuffle, seed=self.seed, epoch=self.epoch,
                                 remaining=left), lo, hi

    def _batches(self, worker: int, workers: int, skip: int):
        """Batch mode over indexed shards. Batch b holds positions [b*B, (b+1)*B)
        of this rank's sequence; worker w decodes batches w, w + workers, ...
        (after ``skip`` of its own)."""
        size = cast(int, self.batch_size)
        planner, lo, hi = self._sequence(worker, workers)
        count = (hi - lo) // size if self.drop_last else -(-(hi - lo) // size)
        return self._pipeline().batches(planner, lo, hi, size, count, worker, workers, skip)

    def _records(self, worker: int, workers: int, skip: int):
        """Record mode over indexed shards: this reader's range of the epoch's
        sequence, read a group at a time (shard by shard, ascending offsets).
        The first value is None, once the first read has begun; then the
        (position, record) pairs."""
        planner, lo, hi = self._sequence(worker, workers)
        if not self.shuffle:  # in order: runs of one shard, up to _GROUP_BYTES each
            groups = ((s.shard * np.ones(len(piece), np.int64), piece) for s in planner.segments(lo, hi)
                      for piece in _pieces(self.indexes[s.shard], s.records))
        else:
            size = self.shuffle_block * plan.SHUFFLE_WINDOW
            groups = (planner.pairs(a, b) for a, b in plan.read_groups(lo, hi, size))
            if self.shuffle_buffer > 1:
                refs = (pair for shards, records in groups for pair in zip(shards.tolist(), records.tolist()))
                groups = (columns(chunk) for chunk in chunked(self._mixed(refs, worker, workers), size, False))
        session = ReadSession(self.remote, self.paths, verify=self.verify, report=self.policy.reporter(),
                              indexes=self.indexes, scatter=Scatter(hi - lo, workers) if self.shuffle else None,
                              order=plan.shards_in_order(planner, [(min(lo + skip, hi), hi)]))

        def units():
            done = 0  # units (records) of the plan finished before this group
            first = True
            asked = 0  # bytes of the reads before, in the first group
            for shards, records in groups:
                if done + len(shards) <= skip:
                    done += len(shards)
                    continue
                start = max(skip - done, 0)
                session.began(shards[start:])
                cuts = [start, len(shards)]
                sizes = None
                if first:  # the first read small, so the first items wait for it alone
                    first = False
                    sizes = _record_sizes(self.indexes, shards[start:], records[start:])
                    cuts[1:1] = [start + cut for cut in plan.ramp_cuts(sizes)]
                for a, b in zip(cuts, cuts[1:]):
                    early = self.shuffle and sizes is not None and asked < plan.EARLY_BYTES
                    yield _Read(done + a, shards[a:b], records[a:b], early)
                    if sizes is not None:
                        asked += int(sizes[a - start:b - start].sum())
                done += len(shards)

        # the first shuffled items wait for no fill's later ranges: the early reads' records past a
        # fill's first range come from the bucket (at most about EARLY_BYTES fetched twice); in
        # order, a fill's first ranges grow as the reads do, and the reads wait for them
        def fetch(unit: _Read) -> tuple[int, list]:
            return unit.position, fetch_scattered(self.paths, self.indexes, unit.shards, unit.records,
                                                  session.first_context if unit.early else session.context)

        # a shard whose copy is being filled is read where its records are decoded, as a complete
        # copy's is: its reads wait for the fill, and only records far past what the fill has written
        # (shuffled) go to the bucket, by requests in flight together; a read-ahead thread cost more
        # CPU in hand-offs and in allocations from another malloc arena than its overlap saved, and the
        # records it fetched ahead of the fills went to the bucket more often
        def remote(unit: _Read) -> bool:  # the group waits on the bucket: read it ahead
            return session.from_bucket(unit.shards)

        with session:  # closed after the read-ahead; ended when the records ran out
            source = fetch_ahead(units(), fetch, remote=remote, weight=_group_bytes)
            try:
                source.begin()
                yield None  # begun: the caller takes this before it asks for the first record
                for done, items in source:
                    for item in items:
                        done += 1
                        yield done, SKIPPED if item is None else self._decode(item)
            finally:
                source.close()

    def _streamed(self, worker: int, workers: int, skip: int):
        """Streamed (compressed) shards, dealt whole; the first ``skip`` units
        are read again but not decoded."""
        shards = plan.plan_shards(len(self.paths), rank=self.rank, world_size=self.world_size,
                                      worker=worker, num_workers=workers, shuffle=self.shuffle,
                                      seed=self.seed, epoch=self.epoch)
        if not shards:
            self._no_shards(worker, workers)
        session = ReadSession(self.remote, self.paths, verify=self.verify, report=self.policy.reporter(),
                              order=list(shards))

        def opened(shard: int):
            session.began([shard])
            records = stream_shard(self.paths[shard], session.context, compression=self.compression)
            return self._first.indexing(shard, records)  # firstepoch: indexed as it is read

        located = interleave([functools.partial(opened, s) for s in shards], self.cycle_length if self.shuffle else 1)
        units = self._mixed(located, worker, workers)
        if self.batch_size is not None:
            out = self._pipeline().streamed_batches(chunked(units, self.batch_size, self.drop_last), skip,
                                                    (worker,))
        else:
            out = self._streamed_records(units, skip)
        return _closing(out, session)

    def _no_shards(self, worker: int, workers: int) -> None:
        """This reader was dealt no streamed shard: an error if its whole rank
        was (DDP would wait for that rank forever), else a warning (an idle
        DataLoader worker)."""
        n, indexed_off = len(self.paths), self._index_args.index is False
        if self.rank * workers >= n:  # readers rank*workers .. +workers-1 take positions below n
            raise ValueError(_idle_ranks(n, self.world_size, workers, indexed_off, self.rank))
        readers = f"{self.world_size} ranks x {workers}" if self.world_size > 1 else f"{workers}"
        warnings.warn(f"{type(self).__name__}: DataLoader worker {worker} of {workers}"
                      f"{f' on rank {self.rank}' if self.world_size > 1 else ''} reads nothing: {n} streamed "
                      f"shard(s) are dealt whole to {readers} DataLoader workers; "
                      f"{_STREAMED_REMEDY if not indexed_off else _UNINDEXED_REMEDY}, or use fewer workers",
                      RuntimeWarning, stacklevel=2)

    def _streamed_records(self, units, skip: int):
        for position, unit in enumerate(units, start=1):
            if position > skip:
                yield position, self._decode(unit)

    def _decode(self, item: Located):
        fused = self._per_sample()
        return decode_or_skip(item, fused.spec, fused.transform, self.policy.reporter())

    def _per_sample(self) -> PerSample:
        """The spec and transform the per-sample path decodes with: a fusable
        head of the transform done while decoding (:func:`fuse_per_sample`),
        worked out again if ``spec``, ``transform`` or ``images`` is reassigned."""
        given = _Settings(self.spec, self.transform, self.images)
        if self._fused is None or any(a is not b for a, b in zip(self._fused[0], given)):
            self._fused = (given, PerSample(*fuse_per_sample(*given)))
        return self._fused[1]


_GROUP_BYTES = 16 << 20  # records of a shard read in order as one group (one window)
_STREAMED_REMEDY = ("compressed shards cannot be indexed: decompress them (`tfrecord-torch decompress`) so "
                    "their records are split over every rank and worker, or write more shards than "
                    "ranks x DataLoader workers")
_UNINDEXED_REMEDY = ("Source(index=False) streams the shards: leave index= at its default so their records "
                     "are split over every rank and worker, or write more shards than ranks x DataLoader workers")


def _idle_ranks(shards: int, world_size: int, workers: int | None, indexed_off: bool, rank: int | None = None
                ) -> str:
    """The error for streamed shards that leave a rank with nothing to read."""
    if workers is None:
        who = f"rank {shards} reads nothing" if shards == world_size - 1 else \
            f"ranks {shards} to {world_size - 1} read nothing"
    else:
        who = f"rank {rank} reads nothing with {workers} DataLoader workers per rank"
    return (f"{shards} streamed shard(s) for {world_size} ranks: shards are dealt whole, so {who}, and "
            f"DistributedDataParallel would wait for them forever; "
            f"{_UNINDEXED_REMEDY if indexed_off else _STREAMED_REMEDY}")


def _pieces(index: np.ndarray, records: np.ndarray) -> list[np.ndarray]:
    """``records`` (ascending, consecutive) cut into groups of up to
    _GROUP_BYTES (at least one record each)."""
    ends = np.cumsum(index[records, 1])
    cuts = np.flatnonzero(np.diff(ends // _GROUP_BYTES)) + 1
    return np.split(records, cuts)


def _record_sizes(indexes: list, shards: np.ndarray, records: np.ndarray) -> np.ndarray:
    """The framed size of record ``records[i]`` of shard ``shards[i]``, each i."""
    sizes = np.empty(len(records), np.int64)
    for shard in np.unique(shards).tolist():
        at = shards == shard
        sizes[at] = indexes[shard][records[at], 1]
    return sizes


def _group_bytes(group: tuple[int, list]) -> int:
    return sum(len(item.payload) for item in group[1] if item is not None)


class _Read(NamedTuple):
    """One read of record mode: records ``records[i]`` of shards ``shards[i]``,
    the first at ``position`` of the reader's sequence."""

    position: int
    shards: np.ndarray
    records: np.ndarray
    early: bool  # shuffled, and begins before the iteration has read plan.EARLY_BYTES


class _IndexArgs(NamedTuple):
    """What building the indexes needs, kept until they are first needed."""

    index: Any  # Source.index
    listing: Any  # the shard listing (find_shards)


class _Settings(NamedTuple):
    """The dataset's settings the per-sample path's decoding is worked out from."""

    spec: Any
    transform: Callable | None
    images: ImageBatching | None


class PerSample(NamedTuple):
    """What the per-sample path decodes with: the spec (with a fused crop) and
    the rest of the transform."""

    spec: Any
    transform: Callable | None


def _reader() -> list[int]:
    """[worker, workers]: this DataLoader worker, or [0, 1] outside one."""
    info = torch.utils.data.get_worker_info()
    return [0, 1] if info is None else [info.id, info.num_workers]


def _closing(items: Iterator, session: ReadSession) -> Iterator:
    """``items``, with ``session`` closed when they end or are dropped (its
    copies' fills let end first when the items ran out)."""
    with session:
        yield from items
