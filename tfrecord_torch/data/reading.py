"""Fetching records for the datasets: by index (ranges or single records)
or by streaming whole shards, each payload with where it came from."""

from __future__ import annotations

import collections
import contextlib
import itertools
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.ma  # noqa: F401 - np.unique imports it at its first call: here, forked DataLoader workers inherit it

from tfrecord_torch.data.readahead import ReadAhead
from tfrecord_torch.data.windows import ShardWindows
from tfrecord_torch.errors import (
    CorruptRecordError,
    ExampleDecodeError,
    FeatureError,
    RemoteError,
    StaleIndexError,
)
from tfrecord_torch.example.codec import parse_example
from tfrecord_torch.example.tensorproto import DTYPES, TensorProto, looks_like_tensorproto
from tfrecord_torch.io import pool, ranges
from tfrecord_torch.io.budget import ReadBudget
from tfrecord_torch.io.copies import ShardCopies
from tfrecord_torch.io.files import is_url
from tfrecord_torch.io.listing import ListingCheck, changed_since_listed
from tfrecord_torch.records.crc import crc32c
from tfrecord_torch.records.frames import READ_LIMIT, compiled_frames, cut_frames, read_frames, read_records
from tfrecord_torch.records.framing import iter_chunks, parse_frame
from tfrecord_torch.records.stale import explain
from tfrecord_torch.records.streams import open_bytes, open_stream

__all__ = ["SKIPPED", "Located", "ReadContext", "Run", "Scattered", "fetch", "fetch_runs", "fetch_runs_together",
           "fetch_scattered", "gather_scattered", "interleave", "locate", "parse_located", "stream_shard"]



class Located(NamedTuple):
    payload: bytes
    path: str
    offset: int
    record: int


class Run(NamedTuple):
    """Records of one shard read together: payload ``i`` is record
    ``numbers[i]``, whose header is at byte ``offsets[i]``."""

    payloads: list
    path: str
    offsets: np.ndarray
    numbers: np.ndarray

    def items(self) -> list[Located]:
        return list(map(Located._make, zip(self.payloads, itertools.repeat(self.path), self.offsets.tolist(),
                                           self.numbers.tolist())))


@dataclass(frozen=True, kw_only=True)
class ReadContext:
    """How one iterator reads its records (the same for every shard it reads).

    Attributes:
        storage_options: fsspec options for URLs.
        verify: check each record's CRCs.
        report: the error policy's reporter: a bad record is reported to it
            and skipped; None: it is raised.
        readers: open readers to borrow; None: each call opens its own.
        copies: local copies of remote shards for streaming; None: from the bucket.
        listing: the check of the remote shards streamed from the bucket
            against their listing (once per iteration; the copies' own when
            there are copies); None: no check.
        far: bytes past what a shard's fill has written beyond which a
            scattered read goes to the bucket instead of waiting (None: the
            budget's ``far``).
        windows: remote shards fetched a window at a time and kept (for
            scattered reads); None: each record by its own range.
        budget: the sizes of an in-order read's windows (they start at its
            ``first`` bytes and double, as a fill's first ranges do); the
            budget of a reader pool made for a call without ``readers``.
    """

    storage_options: dict | None = None
    verify: bool = True
    report: Callable[[CorruptRecordError], None] | None = None
    readers: pool.ReaderPool | None = None
    copies: ShardCopies | None = None
    listing: ListingCheck | None = None
    far: int | None = None
    windows: ShardWindows | None = None
    budget: ReadBudget = ReadBudget()


_DEFAULT = ReadContext()


def fetch(path: str, index: np.ndarray, records: np.ndarray, context: ReadContext = _DEFAULT
          ) -> Iterator[Located]:
    """The records ``records`` of an indexed shard, in that order (see :func:`fetch_runs`)."""
    for run in fetch_runs(path, index, records, context):
        yield from run.items()


def fetch_runs(path: str, index: np.ndarray, records: np.ndarray, context: ReadContext = _DEFAULT
               ) -> Iterator[Run]:
    """The records ``records`` of an indexed shard, in that order, a run at a time.

    An ascending run of consecutive records is read in windows (as
    ``context.budget`` ramps: the first of 1 MiB, each next one twice as
    long, up to its ``window`` (16 MiB) each of a local file; for a URL, up to its ``requests.longest``
    (4 MiB) each, several requests in flight while a window is cut), each cut and
    checked by one compiled call (:func:`~tfrecord_torch.records.frames.cut_frames`),
    or scanned where that does not vouch for its frames. Other records of a
    local file are read and checked by one compiled call
    (:func:`~tfrecord_torch.records.frames.read_records`: a ``preadv`` per
    stretch of adjacent records, the GIL released once); those of a URL, or
    those that call does not vouch for, together by
    :func:`~tfrecord_torch.io.ranges.read_ranges` (near ones in one request,
    the requests of a URL in flight at once), each checked by
    :func:`~tfrecord_torch.records.framing.parse_frame`, which names a bad one. With a ``report``
    in the context, bad records are reported and skipped; when a bad length
    ends a window's scan, reading resumes at the next record through the index.
    """
    if not len(records):
        return
    verify = context.verify
    with _readers(context, 1) as readers, readers.borrow(path) as reader:
        if len(records) > 1 and int(records[-1]) - int(records[0]) + 1 == len(records) and \
                (np.diff(records) == 1).all():
            first, last = int(records[0]), int(records[-1])
            fd = reader.descriptor()  # a local file: one compiled read and check, if the records are sound
            payloads = read_frames(fd, index, first, last + 1, verify, crc32c) if fd is not None else None
            if payloads is not None:
                yield Run(payloads, path, index[first:last + 1, 0], np.arange(first, last + 1))
                return
            yield from _windows(path, index, int(records[0]), int(records[-1]), reader, context)
            return
        fd = reader.descriptor()  # a local file: one compiled read and check, if the records are sound
        if fd is not None:
            numbers = np.ascontiguousarray(records, np.int64)
            payloads = _read_records(fd, index, numbers, verify)
            if payloads is not None:
                yield Run(payloads, path, index[numbers, 0], numbers)
                return
        rows = index[records]
        yield _parse_run(path, index, records, ranges.read_ranges(reader, rows[:, 0].tolist(), rows[:, 1].tolist()),
                         context)


def _read_records(fd: int, index: np.ndarray, numbers: np.ndarray, verify: bool) -> list[bytes] | None:
    """:func:`~tfrecord_torch.records.frames.read_records` of ``numbers``
    (valid numbers of the index), in calls of at most
    :data:`~tfrecord_torch.records.frames.READ_LIMIT` bytes of frames each
    (a batch of large records is more than one call takes); None where a
    call leaves its records to the usual path."""
    ends = np.cumsum(index[numbers, 1])
    if not len(ends) or ends[-1] <= READ_LIMIT:
        return read_records(fd, index, numbers, verify, crc32c)
    payloads: list[bytes] = []
    start, base = 0, 0
    while start < len(numbers):
        stop = max(int(np.searchsorted(ends, base + READ_LIMIT, side="right")), start + 1)
        part = read_records(fd, index, numbers[start:stop], verify, crc32c)
        if part is None:
            return None
        payloads += part
        start, base = stop, int(ends[stop - 1])
    return payloads


def _parse_run(path: str, index: np.ndarray, records: np.ndarray, frames: list[bytes], context: ReadContext) -> Run:
    """The payloads of ``frames``, the frames of ``records``, checked; a bad
    one is reported and left out (with a ``report`` in the context) or raised."""
    payloads, numbers = [], []
    for r, frame in zip(records.tolist(), frames):
        offset = int(index[r, 0])
        try:
            payloads.append(parse_frame(frame, name=path, offset=offset, record=r, verify=context.verify))
        except CorruptRecordError as e:
            error = explain(e, index, context.storage_options)  # a stale index is raised, never skipped
            if context.report is None or error is not e:
                raise error from None
            context.report(e)
            continue
        numbers.append(r)
    found = np.array(numbers, np.int64)
    return Run(payloads, path, index[found, 0], found)


def fetch_scattered(paths: list[str], indexes: list, shards: np.ndarray, records: np.ndarray,
                    context: ReadContext = _DEFAULT) -> list[Located | None]:
    """Records from many shards, in the given order (see
    :func:`gather_scattered`): item ``i`` is record ``records[i]`` of shard
    ``shards[i]``, or None where the context's ``report`` skipped a bad
    record."""
    return gather_scattered(paths, indexes, shards, records, context).items()


def gather_scattered(paths: list[str], indexes: list, shards: np.ndarray, records: np.ndarray,
                     context: ReadContext = _DEFAULT) -> Scattered:
    """Records from many shards, in the given order, read shard by shard in
    ascending offsets: a local shard's by one compiled call (a positioned
    read per stretch of adjacent records, never a seek back; without the
    compiled reader, one per run of consecutive records and one per record
    elsewhere); remote
    shards with the requests of all shards in flight together (near records
    in one request, see :mod:`tfrecord_torch.io.ranges`), except a single
    run of consecutive records of one shard (an in-order read), read as
    :func:`fetch_runs` reads it: scanned whole, from the shard's local copy
    with one compiled read once it is complete. The records
    found, by position asked: :class:`Scattered`."""
    read: dict[int, list[Run]] = collections.defaultdict(list)  # per shard, the runs read of it
    one = len(shards) and shards[0] == shards[-1] and (shards == shards[0]).all()
    wanted = {int(shards[0]): _distinct(records)} if one else \
        {shard: _distinct(records[shards == shard]) for shard in _distinct(shards).tolist()}
    remote = [shard for shard in wanted if is_url(paths[shard])]
    if len(remote) > 1 and context.windows is None and all(_consecutive(wanted[s]) for s in remote):
        # runs of consecutive records of several shards (an in-order read of small shards), fetched
        # together, each checked and cut by one scan of the run, not record by record
        for shard, together in zip(remote, fetch_runs_together([paths[s] for s in remote],
                                                          [indexes[s] for s in remote], [wanted[s] for s in remote],
                                                          context)):
            read[shard] += together
        wanted = {shard: w for shard, w in wanted.items() if shard not in remote}
        remote = []
    elif len(wanted) == 1 and remote and _one_run(wanted[remote[0]]) and \
            (context.windows is None or not context.windows.covers(paths[remote[0]])):
        remote = []  # checked and cut by one scan of the run, not record by record
    if remote:
        for shard, run in zip(remote, _fetch_remote([paths[s] for s in remote], [indexes[s] for s in remote],
                                                    [wanted[s] for s in remote], context)):
            read[shard].append(run)
    for shard in wanted.keys() - set(remote):
        for piece in _pieces(wanted[shard], is_url(paths[shard])):
            read[shard] += fetch_runs(paths[shard], indexes[shard], piece, context)
    return Scattered(shards, records, read)


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-d integer array, at a quarter of its cost."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _pieces(records: np.ndarray, url: bool) -> list[np.ndarray]:
    """How :func:`fetch_scattered` hands a shard's wanted ``records``
    (ascending) to :func:`fetch_runs`: a local shard's all at once where
    the compiled reader reads them (one call, adjacent ones in one
    ``preadv``); otherwise each run of consecutive records on its own (read
    in windows) and the lone records together."""
    if not url and compiled_frames():
        return [records]
    runs = np.split(records, np.flatnonzero(np.diff(records) != 1) + 1)
    singles = [r for r in runs if len(r) == 1]
    return [r for r in runs if len(r) > 1] + ([np.concatenate(singles)] if singles else [])


class _ShardFound(NamedTuple):
    """What :class:`Scattered` found of one shard: its runs' payloads,
    offsets and record numbers, joined; the positions asked of it that were
    found (``at``) and the payload index of each (``picks``)."""

    path: str
    payloads: list
    offsets: np.ndarray
    numbers: np.ndarray
    at: np.ndarray
    picks: np.ndarray


class Scattered:
    """The records :func:`gather_scattered` read, by position asked:
    position ``i`` is record ``records[i]`` of shard ``shards[i]`` found in
    the runs read of that shard, or None (a record they left out). The
    payloads are placed in order without an object per record; the
    located items only when asked for (a batch's errors need them)."""

    def __init__(self, shards: np.ndarray, records: np.ndarray, read: dict[int, list[Run]]) -> None:
        self._count = len(records)
        self._found: list[_ShardFound] = []
        for shard, runs in read.items():
            if not runs:
                continue
            numbers = np.concatenate([run.numbers for run in runs]) if len(runs) > 1 else runs[0].numbers
            if not len(numbers):
                continue
            offsets = np.concatenate([run.offsets for run in runs]) if len(runs) > 1 else runs[0].offsets
            payloads = runs[0].payloads if len(runs) == 1 else [p for run in runs for p in run.payloads]
            order = np.argsort(numbers, kind="stable")
            at = np.flatnonzero(shards == shard)  # the positions that ask for this shard's records
            asked = records[at]
            k = order[np.minimum(np.searchsorted(numbers[order], asked), len(numbers) - 1)]
            hit = numbers[k] == asked
            self._found.append(_ShardFound(runs[0].path, payloads, offsets, numbers, at[hit], k[hit]))

    def payloads(self) -> list[bytes]:
        """The payloads found, in the order asked (those left out skipped)."""
        if len(self._found) == 1 and len(self._found[0].at) == self._count:  # one shard, every record found
            found = self._found[0]
            return [found.payloads[j] for j in found.picks.tolist()]
        out: list = [None] * self._count
        for found in self._found:
            for pos, j in zip(found.at.tolist(), found.picks.tolist()):
                out[pos] = found.payloads[j]
        return [p for p in out if p is not None]

    def items(self) -> list[Located | None]:
        """Each position's record with where it lies, None where left out."""
        out: list[Located | None] = [None] * self._count
        for found in self._found:
            picks = found.picks
            for pos, j, r, offset in zip(found.at.tolist(), picks.tolist(), found.numbers[picks].tolist(),
                                         found.offsets[picks].tolist()):
                out[pos] = Located._make((found.payloads[j], found.path, offset, r))
        return out


@contextlib.contextmanager
def _readers(context: ReadContext, limit: int) -> Iterator[pool.ReaderPool]:
    """The context's reader pool; without one, a pool of ``limit`` readers
    for the block, closed (its request threads joined) at its end."""
    if context.readers is not None:
        yield context.readers
        return
    own = pool.ReaderPool(context.storage_options, limit=limit, budget=context.budget)
    try:
        yield own
    finally:
        own.close()


def _one_run(records: np.ndarray) -> bool:
    """Whether ascending ``records`` are more than one, all consecutive."""
    return len(records) > 1 and _consecutive(records)


def _consecutive(records: np.ndarray) -> bool:
    """Whether ascending, distinct ``records`` are consecutive numbers."""
    return int(records[-1]) - int(records[0]) + 1 == len(records)


def fetch_runs_together(paths: list[str], indexes: list, wanted: list[np.ndarray], context: ReadContext
                   ) -> list[list[Run]]:
    """The runs of consecutive records ``wanted[i]`` (ascending) of shards
    ``paths[i]`` (remote ones: an in-order read of small shards, or a batch
    of several), a list of runs per shard: each run cut into windows of the budget's
    ``requests.longest`` bytes, every window of every shard in flight
    together, each window checked and cut by one compiled call (or scanned,
    and read on through the index after a bad length, as :func:`fetch_runs`
    reads a run)."""
    longest = context.budget.requests.longest
    plans = [_plan_windows(index, int(w[0]), int(w[-1]), itertools.repeat(longest))
             for index, w in zip(indexes, wanted)]
    with contextlib.ExitStack() as stack:
        borrowed = stack.enter_context(_readers(context, len(paths)))
        readers = [stack.enter_context(borrowed.borrow(p)) for p in paths]
        got = ranges.read_many([(reader, [w.start for w in windows], [w.size for w in windows])
                                for reader, windows in zip(readers, plans)], far=context.far)
        return [list(_shard_runs(path, index, windows, data, reader, context))
                for path, index, reader, windows, data in zip(paths, indexes, readers, plans, got)]


def _shard_runs(path: str, index: np.ndarray, windows: list[_Window], data: list[bytes], reader: pool.Reader,
                context: ReadContext) -> Iterator[Run]:
    """The runs of a shard's fetched ``windows``; after a scan stopped by a
    bad record, the rest read through the index."""
    stopped = yield from _cut_windows(path, index, windows, data, context)
    if stopped is not None and stopped < windows[-1].stop:
        yield from _windows(path, index, stopped + 1, windows[-1].stop, reader, context)


def _fetch_remote(paths: list[str], indexes: list, wanted: list[np.ndarray], context: ReadContext) -> list[Run]:
    """The records ``wanted[i]`` (ascending) of remote shard ``paths[i]``, one
    run per shard, every shard's requests in flight together (the windows
    not yet held, for the shards the context's ``windows`` cover)."""
    windows = context.windows
    fetched: list[list[int] | None] = []  # per shard: the windows fetched, or None (its records' ranges)
    asked = []
    for path, index, w in zip(paths, indexes, wanted):
        if windows is not None and windows.covers(path):
            numbers, starts, sizes = windows.missing(path, index, w)
            fetched.append(numbers)
            asked.append((starts, sizes))
        else:
            rows = index[w]
            fetched.append(None)
            asked.append((rows[:, 0].tolist(), rows[:, 1].tolist()))
    with contextlib.ExitStack() as stack:
        borrowed = stack.enter_context(_readers(context, len(paths)))
        readers = [stack.enter_context(borrowed.borrow(p)) for p in paths]
        got = ranges.read_many([(reader, *a) for reader, a in zip(readers, asked)], far=context.far)
    runs = []
    for path, index, w, kept, data in zip(paths, indexes, wanted, fetched, got):
        if kept is not None:
            assert windows is not None  # kept windows come from the windows
            windows.keep(path, kept, data)
            data = windows.frames(path, index, w)
        runs.append(_parse_run(path, index, w, data, context))
    return runs


class _Window(NamedTuple):
    """Records ``first`` to ``stop`` of a shard, in bytes [start, start + size)."""

    first: int
    stop: int
    start: int
    size: int


def _plan_windows(index: np.ndarray, first: int, last: int, steps: Iterator[int]) -> list[_Window]:
    """Records ``first`` to ``last`` cut into windows of ``steps`` bytes each
    (a read budget's ramp: the first of ``budget.first`` bytes, each next one
    twice as long, up to a longest); at least one record each."""
    lo = first
    ends = index[lo:last + 1, 0] + index[lo:last + 1, 1]  # ends[r - lo]: where record r ends
    bounds: list[tuple[int, int]] = []  # (first, last) record of each window
    while first <= last:
        step = next(steps)
        start = int(index[first, 0])
        # the window's last record: as many as fit, at least one
        fit = int(np.searchsorted(ends, start + step, side="right")) - 1 + lo
        stop = min(max(fit, first), last)
        bounds.append((first, stop))
        first = stop + 1
    starts = [int(index[a, 0]) for a, _ in bounds]
    return [_Window(a, b, s, int(ends[b - lo]) - s) for (a, b), s in zip(bounds, starts)]


def _windows(path: str, index: np.ndarray, first: int, last: int, reader: pool.Reader,
             context: ReadContext) -> Iterator[Run]:
    longest = context.budget.window if reader.descriptor() is not None else context.budget.requests.longest
    windows = _plan_windows(index, first, last, context.budget.ramp(longest))
    fetched = ranges.iter_ranges(reader, [w.start for w in windows], [w.size for w in windows], join=False)
    try:
        stopped = yield from _cut_windows(path, index, windows, fetched, context)
    finally:
        fetched.close()
    if stopped is not None and stopped < last:  # resume after the record that stopped the scan
        yield from _windows(path, index, stopped + 1, last, reader, context)


def _cut_windows(path: str, index: np.ndarray, windows: list[_Window], fetched: Iterable[bytes],
                 context: ReadContext) -> Generator[Run, None, int | None]:
    """The runs of ``windows``, whose bytes ``fetched`` gives in turn: each
    cut and checked by one compiled call where its frames are sound, else
    scanned; returns the record that stopped a scan (the windows after it
    are not read), else None."""
    for w, data in zip(windows, fetched):
        cut = cut_frames(data, index, w.first, w.stop + 1, context.verify, crc32c)  # sound frames: one compiled call
        if cut is not None:
            yield Run(cut, path, index[w.first:w.stop + 1, 0], np.arange(w.first, w.stop + 1))
            continue
        stopped = yield from _scan_window(path, index, w, data, context)
        if stopped is not None:
            return stopped
    return None


def _scan_window(path: str, index: np.ndarray, w: _Window, data: bytes, context: ReadContext
                 ) -> Generator[Run, None, int | None]:
    """The runs of a window the compiled cut did not vouch for, scanned frame
    by frame; returns the last record that stopped the scan (reported under
    the policy) when the scan stopped before the window's end, else None."""
    verify, report, so = context.verify, context.report, context.storage_options
    changed = changed_since_listed(path, so) if is_url(path) else None
    if changed is not None:  # the index describes the object as listed: none of the new one's records
        raise RemoteError(path, f"records {w.first}-{w.stop} at byte offset {w.start}: {changed}")
    stopped_at: list[int] = []

    def note(error: CorruptRecordError) -> None:
        explained = explain(error, index, so)
        if explained is not error:  # a stale index is raised, never skipped
            raise explained
        stopped_at.append(error.record)
        if report is not None:  # it is: note is given to the scan only with a report
            report(error)

    stream = open_bytes(data, path)
    done = w.first - 1
    try:
        for chunk in iter_chunks(stream, verify=verify, offset=w.start, record=w.first, payloads=True,
                                 block_size=max(w.size, 1), report=note if report else None):
            done = int(chunk.numbers[-1])
            yield Run(chunk.payloads(), path, chunk.offsets, chunk.numbers)
    except CorruptRecordError as e:
        explained = explain(e, index, so)
        if explained is e:
            raise
        raise explained from None
    if not stopped_at and done != w.stop:  # the bytes scanned clean, but hold other records
        raise StaleIndexError(path, w.start, w.first, f"the index puts records {w.first}-{w.stop} in bytes "
                              f"{w.start}-{w.start + w.size}, which hold {done - w.first + 1} records")
    return max(stopped_at) if done < w.stop and stopped_at else None


def stream_shard(path: str, context: ReadContext = _DEFAULT, *, compression="auto") -> Iterator[Located]:
    """Every record of a shard, streamed (compressed shards need this); the
    context's readers are not used. A remote shard read from the bucket is
    read ahead by a background thread while its records are decoded (up to
    the context's ``budget.stream`` bytes of chunks waiting, each request
    fetching as many past what was asked for); its
    local copy (complete, or as the shard cache fills it) is read in the
    consumer's thread."""
    copies = context.copies
    copy = copies.open_file(path) if copies is not None and copies.covers(path) else None
    listing = copies.listing if copies is not None else context.listing
    if copy is None and listing is not None and is_url(path):  # from the bucket: the object listed, or an error
        listing.check(path)
    chunks: Iterator = _stream_chunks(path, copy, context, compression)
    if is_url(path) and copy is None:
        chunks = ReadAhead(chunks, weight=lambda chunk: len(chunk.buf), limit=max(context.budget.stream, 1))
    try:
        for chunk in chunks:
            for i, payload in enumerate(chunk.payloads()):
                yield Located(payload, path, int(chunk.offsets[i]), int(chunk.numbers[i]))
    finally:
        chunks.close()  # type: ignore[attr-defined]
        if copy is not None:
            copy.close()


def _stream_chunks(path: str, copy, context: ReadContext, compression) -> Iterator:
    """The chunks of ``path``, read from ``copy`` (its local copy, a file) if given."""
    with open_stream(copy or path, compression, context.storage_options, ahead=context.budget.stream) as stream:
        yield from iter_chunks(stream, verify=context.verify, report=context.report, payloads=True)


def interleave(sources: Iterable[Callable[[], Iterator]], cycle_length: int) -> Iterator:
    """Items of several sources at once, as tf.data's ``interleave(cycle_length=...,
    block_length=1)``: ``cycle_length`` sources are open, one item is taken
    from each in turn, and a finished source is replaced in its slot by the
    next one. Sources are opened only when their slot comes up."""
    pending = iter(sources)
    slots: list[Iterator | None] = []
    for _ in range(max(cycle_length, 1)):
        opener = next(pending, None)
        if opener is None:
            break
        slots.append(opener())
    while any(s is not None for s in slots):
        for i, source in enumerate(slots):
            while source is not None:
                item = next(source, _DONE)
                if item is not _DONE:
                    yield item
                    break
                opener = next(pending, None)
                source = slots[i] = None if opener is None else opener()


_DONE = object()


def locate(error: Exception, item: Located) -> Exception:
    """An error raised while decoding ``item``, with the item's location."""
    if isinstance(error, FeatureError):
        return error.at(item.path, item.offset, item.record)
    if isinstance(error, ExampleDecodeError):
        return CorruptRecordError(item.path, item.offset, item.record, f"{error}; {NOT_EXAMPLES}")
    return error


NOT_EXAMPLES = ("if the records hold something other than tf.train.Examples (JSON, a protobuf of "
                "your own, Apache Beam's WriteToTFRecord output), read them with features=Payload() "
                "(each record's bytes) or features=Payload(decode=json.loads) (a decode hook)")


def serialized_tensor(payload: bytes, path: str, offset: int, record: int) -> CorruptRecordError | None:
    """The error for a record that is a serialized tensor (``tf.io.serialize_tensor``'s
    TensorProto) read as an Example, or None if ``payload`` is not one. A
    TensorProto parses as an Example with no features (its fields are all
    unknown to Example), so callers ask only about records that gave none."""
    if not looks_like_tensorproto(payload):  # an empty Example (b"" or b"\\n\\x00") gives False
        return None
    message = TensorProto.FromString(payload)
    shape = [d.size for d in message.tensor_shape.dim]
    cause = ExampleDecodeError(f"a serialized tensor (dtype {DTYPES[message.dtype].name}, shape {shape})")
    error = CorruptRecordError(path, offset, record, f"the record is {cause}, tf.io.serialize_tensor's "
                               f"TensorProto, not a tf.train.Example, so it has no features; read such "
                               f"records with features=Payload(decode=parse_tensor) (from tfrecord_torch "
                               f"import Payload, parse_tensor), which gives each one as a tensor")
    error.__cause__ = cause
    return error


def parse_located(item: Located) -> dict:
    try:
        return parse_example(item.payload)
    except ExampleDecodeError as e:
        raise locate(e, item) from e


SKIPPED = object()  # what decode_or_skip returns for a record the policy skipped
