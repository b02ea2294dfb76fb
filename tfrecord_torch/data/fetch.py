"""Reading items of a map-style dataset by global record number: one item
(``ds[i]``) or a batch of them in one pass (``ds.__getitems__``).

An :class:`ItemFetcher` owns what reading needs: the shards with their
indexes (cumulative record counts to find the shard), a read session (its
reader pool moves the bytes), the
spec with its plan for the compiled reader, and the stand-ins of bad records.
A batch is read in file order (a global index grows with the shard and with
the record's offset in it), one positioned read per run of adjacent records (the
requests of a URL in flight together),
each record read once however often it is asked for; then each index asked
is decoded on its own, so every item is a fresh object.
"""

from __future__ import annotations

import bisect
import operator
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.reading import Located
from tfrecord_torch.data.recordspec import RecordSpec, record_spec
from tfrecord_torch.data.session import Ranges, ReadSession, RemoteShards
from tfrecord_torch.errors import CorruptRecordError, FeatureError, TFRecordError
from tfrecord_torch.example.codec import compiled_reader
from tfrecord_torch.features.images.engine import default_threads
from tfrecord_torch.features.undecoded import apply_transform
from tfrecord_torch.io.files import is_url
from tfrecord_torch.records.framing import parse_frame
from tfrecord_torch.records.stale import explain

__all__ = ["THREAD_RECORDS", "Frame", "ItemFetcher", "SpecPlan"]

THREAD_RECORDS = 4  # the fewest records a decode thread of a batch takes (see ItemFetcher._values)

class SpecPlan(NamedTuple):
    """What reading an item needs to know of a spec and a transform, worked
    out once per pair."""

    spec: Any  # the dataset's spec as given (replaced: planned afresh)
    transform: Any
    record: RecordSpec  # the kind records decode as (RecordSpec.for_items)
    compiled: bool  # the compiled reader reads records for this spec

    @classmethod
    def of(cls, spec: Any, transform: Any = None) -> SpecPlan:
        record = record_spec(spec).for_items(transform)
        return cls(spec, transform, record, compiled_reader() and record.compiled)


class Frame(NamedTuple):
    """One record's frame bytes and where they were read."""

    data: bytes
    path: str
    offset: int
    record: int


class ItemFetcher:
    """Items by global record number over indexed shards, as decoded items.

    Args:
        paths: the shards (uncompressed).
        indexes: each shard's index (``[n, 2]`` offsets and sizes).
        spec: the dataset's bound spec (None, a dict, a SequenceSpec or a
            Payload: :func:`~tfrecord_torch.data.recordspec.record_spec`);
            may be reassigned (it is planned afresh).
        transform: a callable applied to each item; may be reassigned.
        verify: check record CRCs.
        policy: what a bad record does (see :meth:`item`).
        remote: how the shards are reached: the shard cache's copies, or
            the check of the remote shards against their listing (each
            object asked once per process); read through a
            :class:`~tfrecord_torch.data.session.ReadSession` that lasts as
            long as the fetcher.
    """

    def __init__(self, *, paths: list[str], indexes: list[np.ndarray], spec: Any, transform: Callable | None,
                 verify: bool, policy: SharedErrorPolicy, remote: RemoteShards) -> None:
        self.paths, self.indexes = paths, indexes
        self.spec, self.transform, self.verify, self.policy = spec, transform, verify, policy
        self.session = ReadSession(remote, paths, verify=verify, indexes=indexes, fresh=False)
        self.stand_in: dict[int, int] = {}  # bad item -> the readable item that replaced it (per process)
        self.ends = np.cumsum([len(i) for i in indexes], dtype=np.int64)
        self._ends: list[int] = self.ends.tolist()  # bisected per item: no numpy call
        self._starts: list[int] = [0, *self._ends[:-1]]
        self.length = self._ends[-1] if self._ends else 0
        self._planned = SpecPlan.of(spec, transform)
        self._read_in: int | None = None  # the process that has read a batch (a forked worker has not)
        self._remote = any(map(is_url, paths))  # a shard in a bucket: the compiled reader does not read
        self._delivered = False  # this process has given an item: later failures are bad records, not the spec

    def check(self, i: Any) -> int:
        """``i`` as an index in [0, len), negative ones counted from the end."""
        i = operator.index(i)
        n = self.length
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} records")
        return i + n if i < 0 else i

    def location(self, j: int) -> tuple[str, int, int]:
        """(path, byte offset, record number) of checked item ``j`` (or the item standing in for it)."""
        j = self.stand_in.get(j, j)
        shard = bisect.bisect_right(self._ends, j) if len(self._ends) > 1 else 0
        r = j - self._starts[shard]
        return self.paths[shard], self.indexes[shard].item(r, 0), r

    def locate(self, i: int) -> tuple[int, int]:
        """(shard number, record number in the shard) of item ``i``."""
        i = self.check(i)
        shard = bisect.bisect_right(self._ends, i)
        return shard, i - self._starts[shard]

    def item(self, i: Any):
        """The decoded item ``i``; a bad one is reported under the policy and
        the next readable item stands in for it (remembered, so a run of k bad
        items costs O(k) reads)."""
        j = i if type(i) is int and 0 <= i < self.length else self.check(i)
        if self.stand_in:
            j = self.stand_in.get(j, j)  # a bad item met before: straight to its stand-in
        shard = bisect.bisect_right(self._ends, j) if len(self._ends) > 1 else 0
        try:
            item = self._read(shard, j - self._starts[shard])
        except (CorruptRecordError, FeatureError) as e:
            return self._substitute(j, e)
        if not self._delivered:
            self._note_delivered()
        return item

    def items(self, indices: list[int]) -> list:
        """``[self.item(i) for i in indices]`` (checked, non-negative indices),
        read in one pass: each index's record read and decoded, then the
        transform applied index by index in the order asked, as ``item``
        applies it (a transform that draws gets the draws it would get one by
        one); a record the read leaves or that fails is done by ``item``
        where it stands."""
        if not indices:
            return []
        targets = [self.stand_in.get(i, i) for i in indices]  # bad items met before: their stand-ins
        values = self._values(targets)
        if not self._delivered and any(value is not None for value in values):
            self._note_delivered()  # the batch read records: its bad ones are bad records, not the spec's
        transform = self.transform
        out: list[Any] = []
        for i, j, value in zip(indices, targets, values):
            if value is None:  # left by the read, or bad: one by one, reported and replaced as item(i) does
                out.append(self.item(i))
                continue
            if transform is not None:
                path, offset, r = self.location(j)
                try:
                    value = apply_transform(transform, value, path, offset, r)
                except (CorruptRecordError, FeatureError) as e:
                    out.append(self._substitute(j, e))
                    continue
            out.append(value)
        return out

    def _values(self, targets: list[int]) -> list:
        """Each target's record read and decoded, before the transform: by the
        compiled reader, in file order, where it reads; else the records read
        in file order (one read per run of adjacent records) and each target
        decoded on its own, so every item is a fresh object. None for a record
        the compiled reader left or that failed to read or decode.

        Records costly to decode (images) and free of draws are decoded on
        :func:`~tfrecord_torch.features.images.engine.default_threads`
        threads of this call, each a stretch of the targets in file order (at
        least :data:`THREAD_RECORDS` of them), joined before it returns."""
        first = False
        if self._remote:
            # a process's first batch waits for no fill's later ranges: its records past a fill's
            # first range come from the bucket (at most a batch's bytes fetched twice)
            first = self._read_in != os.getpid()
            self._read_in = os.getpid()
        threads = min(default_threads(), len(targets) // THREAD_RECORDS)
        if threads < 2 or self._plan().record.ahead() is None:
            return self._values_here(targets, first)
        order = sorted(range(len(targets)), key=targets.__getitem__)
        stretches = [order[k * len(order) // threads:(k + 1) * len(order) // threads] for k in range(threads)]

        def decode(stretch: list[int]) -> list:
            try:
                return self._values_here([targets[pos] for pos in stretch], first)
            finally:
                self.session.let_go()  # this thread's reader back to the pool: the thread ends with the call

        out: list[Any] = [None] * len(targets)
        with OwnedPool(threads, "tfrecord_torch-items") as pool:
            for stretch, values in zip(stretches, pool.map(decode, stretches)):
                for pos, value in zip(stretch, values):
                    out[pos] = value
        return out

    def _values_here(self, targets: list[int], first: bool) -> list:
        """:meth:`_values` on this thread (``first``: see :meth:`_read_frames`)."""
        compiled = self._compiled_items(targets)
        if compiled is not None:
            return compiled
        unique, inverse = np.unique(np.asarray(targets, np.int64), return_inverse=True)
        frames = self._read_frames(unique, first)
        out: list[Any] = []
        for u in inverse.tolist():
            frame = frames[u]
            try:
                out.append(self._decode(frame.data, frame.path, frame.offset, frame.record, None))
            except (CorruptRecordError, FeatureError):
                out.append(None)
        return out

    def close(self) -> None:
        """Close the open shard files (they reopen on the next read) and stop
        copying shards in the background (the next read of a shard not yet
        copied starts again)."""
        self.session.close(ended=False)

    def _substitute(self, j: int, error: TFRecordError):
        """After item ``j`` failed with ``error``: report it (raises under
        on_error="raise"), then the next readable item stands in, and is
        remembered as the stand-in of every bad item passed over."""
        n = self.length
        self.policy.report(error)
        passed = [j]  # unreadable items passed over on the way to a readable one
        for _ in range(n - 1):
            j = self.stand_in.get((j + 1) % n, (j + 1) % n)  # a run of bad items found before: jump past it
            shard, r = self.locate(j)
            try:
                item = self._read(shard, r)
            except (CorruptRecordError, FeatureError) as e:
                self.policy.report(e)
                passed.append(j)
                continue
            for k in passed:  # later requests for these jump straight here: linear, not quadratic
                self.stand_in[k] = j
            if not self._delivered:
                self._note_delivered()
            return item
        self.policy.raise_spec_error()  # every record failed the same way: the spec's mistake
        raise TFRecordError(f"none of the {n} records of {len(self.paths)} shard(s) is readable")

    def _note_delivered(self) -> None:
        """This process gave an item: a failure from now on is a bad record,
        never taken for a spec error (see :mod:`tfrecord_torch.policy`)."""
        self._delivered = True
        self.policy.delivered()

    def _plan(self) -> SpecPlan:
        planned = self._planned
        if planned.spec is not self.spec or planned.transform is not self.transform:  # replaced since
            planned = self._planned = SpecPlan.of(self.spec, self.transform)
        return planned

    def _read(self, shard: int, r: int):
        path, index = self.paths[shard], self.indexes[shard]
        planned = self._planned
        if planned.spec is not self.spec or planned.transform is not self.transform:
            planned = self._plan()
        if planned.compiled:
            item = self._read_compiled(path, index, r, planned)
            if item is not None:
                if self.transform is None:  # a plain dict: __getitems__ marks a batch for default_collate
                    return item
                return apply_transform(self.transform, item, path, index.item(r, 0), r)
        offset, size = index.item(r, 0), index.item(r, 1)
        data = self.session.read(path, offset, size)
        try:
            return self._decode(data, path, offset, r, self.transform)
        except CorruptRecordError as e:  # a stale index is raised, never replaced
            error = explain(e, index, self.session.context.storage_options)
            if error is e:
                raise
            raise error from None

    def _compiled_items(self, targets: list[int]) -> list | None:
        """Items ``targets`` (checked indices) read in file order by the
        compiled reader, before the transform: a list in the order asked,
        None where it left the record to the usual path; None altogether
        where it cannot read."""
        planned = self._plan()
        if not planned.compiled or self._remote:
            return None
        out: list = [None] * len(targets)
        for pos in sorted(range(len(targets)), key=targets.__getitem__):
            j = targets[pos]
            shard = bisect.bisect_right(self._ends, j)
            out[pos] = self._read_compiled(self.paths[shard], self.indexes[shard], j - self._starts[shard], planned)
        return out

    def _read_compiled(self, path: str, index: np.ndarray, r: int, planned: SpecPlan):
        """Record ``r`` read, checked and decoded by the compiled reader, for a
        local file and a record of the usual shape; None otherwise (then the
        usual path reads it, and raises the error that names it)."""
        fd = self.session.descriptor(path)
        return None if fd is None else planned.record.read_compiled(fd, index, r, self.verify)

    def _decode(self, frame: bytes, path: str, offset: int, r: int, transform: Callable | None):
        payload = parse_frame(frame, name=path, offset=offset, record=r, verify=self.verify)
        return self._plan().record.decode(Located(payload, path, offset, r), transform)

    def _read_frames(self, unique: np.ndarray, first: bool) -> list[Frame]:
        """The frames of the sorted global indices ``unique``, read by the
        session (:meth:`~tfrecord_torch.data.session.ReadSession.read_ranges`):
        adjacent records in one read, the requests of every remote shard in
        flight together; ``first`` (a process's first batch of remote
        shards) waits for no fill's later ranges."""
        shards = np.searchsorted(self.ends, unique, side="right")
        cuts = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(unique)]
        parts, numbers = [], []  # per shard: its ranges, and their record numbers
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            shard = int(shards[lo])
            records = unique[lo:hi] - self._starts[shard]
            rows = self.indexes[shard][records]
            parts.append(Ranges(self.paths[shard], rows[:, 0].tolist(), rows[:, 1].tolist()))
            numbers.append(records.tolist())
        read = self.session.read_ranges(parts, first=first)
        return [Frame(data, part.path, offset, r) for part, records, got in zip(parts, numbers, read)
                for data, offset, r in zip(got, part.offsets, records)]
