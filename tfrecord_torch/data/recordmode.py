"""Record mode of :class:`~tfrecord_torch.data.iterable.TFRecordDataset` over
indexed shards (no ``batch_size``): a reader's range of the epoch's sequence
read a group at a time through one
:class:`~tfrecord_torch.data.session.ReadSession`, the groups fetched ahead of
the decoding (:func:`~tfrecord_torch.data.readahead.fetch_ahead`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from tfrecord_torch.data import plan
from tfrecord_torch.data.buffers import chunked, columns
from tfrecord_torch.data.decodeahead import RecordDecoder
from tfrecord_torch.data.iteration import Reader, ShardReads, Share
from tfrecord_torch.data.plan import Segment
from tfrecord_torch.data.readahead import fetch_ahead
from tfrecord_torch.data.reading import Located, fetch_scattered
from tfrecord_torch.data.session import ReadSession, Scatter
from tfrecord_torch.io.files import is_url

__all__ = ["indexed_records", "record_groups"]


def record_groups(reads: ShardReads, share: Share, block: int, mix: Callable[[Iterator], Iterator] | None
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (shards, records) groups ``share`` is read in: in order, runs of
    one shard of up to the read budget's ``group`` bytes (one window each),
    the runs of consecutive small shards read by range requests joined up
    to it (their requests in flight together: :func:`_joined`); shuffled,
    windows of ``block`` x :data:`~tfrecord_torch.data.plan.SHUFFLE_WINDOW`
    positions, their references mixed by ``mix`` (the shuffle buffer) when
    given."""
    planner, lo, hi = share
    if not reads.shuffle:  # in order: runs of one shard, up to the budget's group bytes each
        group = reads.remote.budget.group
        runs = (Segment(s.shard, piece) for s in planner.segments(lo, hi)
                for piece in _pieces(reads.indexes[s.shard], s.records, group))
        return _joined(runs, reads, group)
    size = block * plan.SHUFFLE_WINDOW
    groups = (planner.pairs(a, b) for a, b in plan.read_groups(lo, hi, size))
    if mix is None:
        return groups
    refs = (pair for shards, records in groups for pair in zip(shards.tolist(), records.tolist()))
    return (columns(chunk) for chunk in chunked(mix(refs), size, False))


def indexed_records(reads: ShardReads, share: Share, reader: Reader, groups: Iterator[tuple[np.ndarray, np.ndarray]],
                    decoder: RecordDecoder, report: Callable | None) -> Iterator:
    """Record mode over indexed shards: this reader's range of the epoch's
    sequence, read a group at a time (shard by shard, ascending offsets),
    decoded by ``decoder`` (on its threads, where it has them). The first
    value is None, once the first read has begun; then the (position,
    record) pairs."""
    planner, lo, hi = share
    workers, skip = reader.workers, reader.skip
    session = ReadSession(reads.remote, reads.paths, verify=reads.verify, report=report,
                          indexes=reads.indexes, scatter=Scatter(hi - lo, workers) if reads.shuffle else None,
                          order=plan.shards_in_order(planner, [(min(lo + skip, hi), hi)]))

    # the first shuffled items wait for no fill's later ranges: the early reads' records past a
    # fill's first range come from the bucket (at most about budget.early fetched twice); in
    # order, a fill's first ranges grow as the reads do, and the reads wait for them
    def fetch(unit: _Read) -> tuple[int, list]:
        return unit.position, fetch_scattered(reads.paths, reads.indexes, unit.shards, unit.records,
                                              session.first_context if unit.early else session.context)

    # a shard whose copy is being filled is read where its records are decoded, as a complete
    # copy's is: its reads wait for the fill, and only records far past what the fill has written
    # (shuffled) go to the bucket, by requests in flight together; a read-ahead thread cost more
    # CPU in hand-offs and in allocations from another malloc arena than its overlap saved, and the
    # records it fetched ahead of the fills went to the bucket more often. Local files are read
    # ahead too where the records are decoded on decode threads (the main process, cores to
    # spare): there a group read where its records are taken is a burst in one next() of the
    # user's loop (benchmarks/results/loop_stackahead_ab.md); without them (a DataLoader
    # worker) the thread would only take the GIL from the reader's own decoding
    local_ahead = decoder.threads > 1

    def remote(unit: _Read) -> bool:  # the group waits on the bucket, or is local with decode threads
        if session.from_bucket(unit.shards):
            return True
        return local_ahead and not any(is_url(reads.paths[s]) for s in np.unique(unit.shards).tolist())

    with session:  # closed after the read-ahead; ended when the records ran out
        source = fetch_ahead(_reads_of(groups, skip, reads, session), fetch, remote=remote, weight=_group_bytes,
                             limit=session.budget.read_ahead)
        try:
            source.begin()
            yield None  # begun: the caller takes this before it asks for the first record
            yield from decoder.each(_numbered(source))
        finally:
            source.close()


def _numbered(groups: Iterator[tuple[int, list]]) -> Iterator[tuple[int, Located | None]]:
    """The items of fetched groups, each with its position (units finished once it is delivered)."""
    for done, items in groups:
        for k, item in enumerate(items, start=done + 1):
            yield k, item


def _reads_of(groups: Iterator[tuple[np.ndarray, np.ndarray]], skip: int, reads: ShardReads,
              session: ReadSession) -> Iterator[_Read]:
    """The reads of ``groups`` after the first ``skip`` records, ``session``
    told of each group's shards as it begins; the first group's first read
    small (:func:`~tfrecord_torch.data.plan.ramp_cuts`), so the first items
    wait for it alone."""
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
            sizes = _record_sizes(reads.indexes, shards[start:], records[start:])
            cuts[1:1] = [start + cut for cut in plan.ramp_cuts(sizes, session.budget)]
        for a, b in zip(cuts, cuts[1:]):
            early = reads.shuffle and sizes is not None and asked < session.budget.early
            yield _Read(done + a, shards[a:b], records[a:b], early)
            if sizes is not None:
                asked += int(sizes[a - start:b - start].sum())
        done += len(shards)


def _joined(runs: Iterator[Segment], reads: ShardReads, group: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (shards, records) groups of in-order ``runs``: each run alone,
    except that consecutive runs of shards read from the bucket by range
    requests (no shard cache) are joined while their bytes stay within
    ``group``. A group of one shard's run is read as a window a request at a
    time; joined, the shards' requests are in flight together
    (:func:`~tfrecord_torch.data.reading.fetch_scattered`), so a bucket of
    small shards costs a round trip per group, not per shard. Shards the
    cache copies are not joined: a reader waits for each one's copy
    (:class:`~tfrecord_torch.io.copies.CopyAhead` copies them ahead), and a
    group's shards whose fills wait behind others would be read from the
    bucket as well."""
    copies = reads.remote.copies

    def ranged(shard: int) -> bool:  # read from the bucket by range requests (no copy to wait for)
        path = reads.paths[shard]
        return is_url(path) and (copies is None or not copies.covers(path))

    shards: list[np.ndarray] = []
    records: list[np.ndarray] = []
    held = 0  # bytes of the runs in hand
    for run in runs:
        size = int(reads.indexes[run.shard][run.records, 1].sum())
        if shards and not (ranged(run.shard) and ranged(int(shards[-1][0])) and held + size <= group):
            yield np.concatenate(shards), np.concatenate(records)
            shards, records, held = [], [], 0
        shards.append(np.full(len(run.records), run.shard, np.int64))
        records.append(run.records)
        held += size
    if shards:
        yield np.concatenate(shards), np.concatenate(records)


def _pieces(index: np.ndarray, records: np.ndarray, group: int) -> list[np.ndarray]:
    """``records`` (ascending, consecutive) cut into groups of up to
    ``group`` bytes (at least one record each)."""
    ends = np.cumsum(index[records, 1])
    cuts = np.flatnonzero(np.diff(ends // group)) + 1
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
    early: bool  # shuffled, and begins before the iteration has read its budget's early bytes
