"""The per-sample path's decoding: records to items, in order.

Where a process has cores to spare (``num_workers=0``, or fewer DataLoader
workers than cores) and the records hold something slow to decode (images),
the records are decoded on the iteration's decode threads ahead of the one
taken (up to :data:`AHEAD_BYTES` of them: a batch or more of images, so the
threads decode while the loop steps). Each decode thread takes the next
group of records from the read and decodes it; the iterating thread only
takes the groups, in the order they were taken, and finishes their items.
Everything whose order is seen stays on the iterating thread, in the
records' order: the dataset's ``transform`` (which may draw from torch's
global generator), errors raised or reported under ``on_error``, and the
positions that resume counts; a read's error comes out after the records
read before it. A record kind that cannot be decoded away from that order
(a fused crop's draws, a ``Payload`` hook, a feature kind defined outside
the package) is decoded on the iterating thread, as is every record when one
thread is all the process has
(:func:`~tfrecord_torch.features.images.engine.default_threads`).

With no transform, each record's images are decoded into (or copied into)
its slot of its batch's buffer, so that the collate of
``DataLoader(ds, batch_size=B)`` copies nothing
(:mod:`~tfrecord_torch.data.stackahead`): in the main process on the decode
threads, off the loop's thread; in a DataLoader worker with one core (no
decode threads), on its iterating thread into the shared memory the batch
is sent in.

Each take costs a lock and a wake-up, so once the records' size is known
small ones go in groups: about :data:`GROUP_BYTES` decoded, at most
:data:`GROUP_RECORDS`; a record whose decode fails in a group leaves the
others of its group decoded, and its error comes where it stands.

A loop's ``next()`` takes a batch's records in a burst; decode threads
that started on the room it makes as it goes would take the cores and the
GIL from it while it finishes the batch. So a thread that waited for room
waits :data:`SETTLE` more after the last take (the decoding starts once
``next()`` returned, while the loop steps), unless the iterating thread
waits for a group or fewer than half the records held ahead are left
(:class:`~tfrecord_torch._threads.Producer`'s ``settle``, here for the
decode threads). Only in the main process: a DataLoader worker's takes are
its own collate's, not the loop's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

from tfrecord_torch._threads import Team
from tfrecord_torch.data.reading import SKIPPED, Located
from tfrecord_torch.data.recordspec import PerSample, decode_or_skip
from tfrecord_torch.data.stackahead import Slot, StackAhead, decoding_into
from tfrecord_torch.errors import CorruptRecordError, FeatureError
from tfrecord_torch.features.images.engine import default_threads
from tfrecord_torch.features.items import Item, as_item
from tfrecord_torch.features.undecoded import apply_transform

__all__ = ["AHEAD_BYTES", "RecordDecoder"]

AHEAD_BYTES = 64 << 20  # the decoded records held ahead of the one taken, at most (their tensors' bytes)
AHEAD_RECORDS = 512  # and at most this many records
FIRST_AHEAD = 16  # records per decode thread held ahead until the sizes of the first ones are known
GROUP_BYTES = 4 << 20  # records a decode thread takes at once: about this many bytes decoded
GROUP_RECORDS = 32  # and at most this many
SETTLE = 0.002  # s: a thread that waited for room waits this long after the last take (see the module's doc)
SIZED = 64  # the records whose size the mean counts: the first 64, then every 64th

Records = list[tuple[int, "Located | None"]]


class _Group(NamedTuple):
    """Records a decode thread took at once, in order, as ``(position,
    item)`` (item None: a record the read left out); ``value``: the items
    that are not None decoded, in order, or the error that stopped it
    (:class:`_Failed`)."""

    records: Records
    value: Any


class _Groups:
    """One iteration's groups of records, between its decode threads and its
    iterating thread. The threads (:meth:`run`) take groups from ``source``
    one thread at a time, so they are numbered in the source's order, each
    decoding the group it took; :meth:`taken` gives them to the iterating
    thread in that order. The records taken and not yet out stay within the
    decoder's depth; the source's end or error comes out after the last group
    taken before it."""

    def __init__(self, decoder: RecordDecoder, source: Iterator[tuple[int, Located | None]]) -> None:
        self._decoder, self._source = decoder, source
        self._take = threading.Lock()  # held by the thread taking from the source
        self._ready = threading.Condition()  # guards the fields below
        self._taken = 0  # groups taken
        self._done: dict[int, _Group] = {}  # decoded, not yet out
        self._held = 0  # records taken, not yet out
        self._end: int | None = None  # the groups taken in all, once the source ended or raised
        self._error: BaseException | None = None  # what the source raised
        self._stopped = False
        self._freed = 0.0  # when the iterating thread last took a group (time.monotonic())
        self._waiting = False  # the iterating thread waits for a group

    def run(self) -> None:
        """A decode thread: take a group and decode it, until the source ends or the iteration does."""
        while self._take_and_decode():
            pass

    def _take_and_decode(self) -> bool:
        decoder = self._decoder
        with self._take:
            with self._ready:
                while not self._stopped and self._end is None and self._held >= decoder._depth():
                    self._ready.wait()
                self._settle()
                if self._stopped or self._end is not None:
                    return False
                depth = decoder._depth()
                count = min(decoder._group(depth), depth - self._held)
            records = self._records(count)
            index = self._taken
            self._taken += 1
            with self._ready:
                self._held += len(records)
            failed: _Failed | None = None
            try:
                stack = decoder._stack
                slots = stack.slots(sum(item is not None for _, item in records)) if stack is not None else None
            except BaseException as e:  # noqa: BLE001 - raised in the group's turn: never a group left out
                slots, failed = None, _Failed(e)
        try:
            value = failed if failed is not None else decoder._decode_group(records, slots)
        except BaseException as e:  # noqa: BLE001 - raised on the iterating thread, in the group's turn
            value = _Failed(e)
        with self._ready:
            self._done[index] = _Group(records, value)
            self._ready.notify_all()
        return True

    def _settle(self) -> None:
        """With ``_ready`` held: wait :data:`SETTLE` after the iterating
        thread's last take, unless it waits for a group, fewer than half the
        records held ahead are left, or the iteration ends."""
        settle = self._decoder._settling
        while settle and not self._stopped and not self._waiting and 2 * self._held >= self._decoder._depth():
            left = self._freed + settle - time.monotonic()
            if left <= 0:
                return
            self._ready.wait(left)

    def _records(self, count: int) -> Records:
        """Up to ``count`` records of the source (fewer: it ended or raised, which ``_end`` then says)."""
        records: Records = []
        try:
            for _ in range(count):
                records.append(next(self._source))
            return records
        except StopIteration:
            pass
        except BaseException as e:  # noqa: BLE001 - raised on the iterating thread after the records before it
            self._error = e
        with self._ready:
            self._end = self._taken + 1
        return records

    def taken(self) -> Iterator[_Group]:
        """The groups in the order taken, each once decoded; then the source's error, if any."""
        index = 0
        ready = self._ready
        while True:
            with ready:
                if index not in self._done and (self._end is None or index < self._end):
                    self._waiting = True  # a settling thread goes at once
                    ready.notify_all()
                    while index not in self._done and (self._end is None or index < self._end):
                        ready.wait()
                    self._waiting = False
                group = self._done.pop(index, None)
                self._freed = time.monotonic()
                if group is None:
                    break
                self._held -= len(group.records)
                ready.notify_all()
            yield group
            index += 1
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """The iteration ended: the threads take nothing more (a group being read or decoded is finished)."""
        with self._ready:
            self._stopped = True
            self._ready.notify_all()


class RecordDecoder:
    """Decodes one iteration's records in order (see the module's doc).

    Args:
        settings: the dataset's :class:`~tfrecord_torch.data.recordspec.PerSample`
            as its settings stand (asked again for each record: a setting
            reassigned during the iteration applies from the next record on).
        report: the policy's reporter (None: a bad record raises).
        threads: decode threads (None: :func:`default_threads`); 1 decodes
            every record on the iterating thread.
    """

    def __init__(self, settings: Callable[[], PerSample], report: Callable | None, threads: int | None) -> None:
        self._settings, self._report = settings, report
        self._first = settings()
        self._ahead = self._first.record.ahead()
        count = threads or default_threads()
        self._threads = count if self._ahead is not None and count > 1 else 1
        self._decoded = self._bytes = 0  # records sized (see SIZED), and their tensors' bytes
        in_worker = get_worker_info() is not None  # a worker stacks into shared memory
        self._settling = 0.0 if in_worker else SETTLE  # the loop's next() is the main process's
        # the batches' slots: where the decode threads run beside the loop, or in a worker with one thread (its
        # shared memory; a worker's decode threads, 64 MiB of records ahead, would fill a segment per batch ahead)
        placed = self._ahead is not None and self._first.transform is None and \
            (self._threads > 1 and not in_worker or self._threads == 1 and in_worker)
        self._stack = StackAhead(shared=in_worker) if placed else None

    @property
    def threads(self) -> int:
        """Decode threads this iteration runs (1: none, every record decoded on the iterating thread)."""
        return self._threads

    def _depth(self) -> int:
        """Records to hold ahead: :data:`AHEAD_BYTES` of records of the mean size
        so far (a batch or more of images: the threads decode while the loop
        steps), at least 2 per thread and at most :data:`AHEAD_RECORDS`."""
        if not self._decoded:
            return FIRST_AHEAD * self._threads
        mean = max(self._bytes // self._decoded, 1)
        return max(2 * self._threads, min(AHEAD_RECORDS, AHEAD_BYTES // mean))

    def decode(self, item: Located) -> Any:
        """One record, decoded on this thread (SKIPPED: reported under ``on_error``)."""
        fused = self._settings()
        return decode_or_skip(item, fused.record, fused.transform, self._report)

    def each(self, items: Iterable[tuple[int, Located | None]]) -> Iterator[tuple[int, Any]]:
        """``(position, item)`` pairs to ``(position, decoded)`` pairs, in order
        (an item None, left out by the read, gives SKIPPED). The decode
        threads start with the first record and are joined when this
        generator ends, however it ends."""
        if self._threads > 1:
            return self._on_threads(iter(items))
        return self._here(items) if self._stack is None else self._placed_here(items)

    def _here(self, items: Iterable[tuple[int, Located | None]]) -> Iterator[tuple[int, Any]]:
        """:meth:`each` on the iterating thread."""
        for position, item in items:
            yield position, SKIPPED if item is None else self.decode(item)

    def _placed_here(self, items: Iterable[tuple[int, Located | None]]) -> Iterator[tuple[int, Any]]:
        """:meth:`each` on the iterating thread of a DataLoader worker, each
        record decoded into its slot of its batch's shared memory (a group
        of one record, finished as the threads' are)."""
        assert self._stack is not None
        try:
            for position, item in items:
                records = [(position, item)]
                slots = None if item is None else self._stack.slots(1)
                yield from self._finish(_Group(records, self._decode_group(records, slots)))
        finally:
            self._stack.close()

    def _on_threads(self, source: Iterator[tuple[int, Located | None]]) -> Iterator[tuple[int, Any]]:
        """:meth:`each` with decode threads (:class:`_Groups`), joined however the iteration ends."""
        groups = _Groups(self, source)
        team = Team(self._threads, "tfrecord-decode", groups.run, groups.stop)
        try:
            team.start()
            for group in groups.taken():
                yield from self._finish(group)
        finally:
            team.close()  # a group being read or decoded is finished first
            if self._stack is not None:
                self._stack.close()

    def _group(self, depth: int) -> int:
        """Records a thread takes at once: :data:`GROUP_BYTES` of records
        of the mean size so far (each take costs a wake-up and a lock), at
        most :data:`GROUP_RECORDS` and a share of ``depth`` that leaves every
        thread two groups, at least 1."""
        if not self._decoded:
            return 1
        mean = max(self._bytes // self._decoded, 1)
        return max(1, min(GROUP_RECORDS, GROUP_BYTES // mean, depth // (2 * self._threads)))

    def _decode_group(self, records: Records, slots: list[Slot | None] | None) -> list[Any]:
        """The items of ``records`` that are not None decoded (on a decode thread)."""
        assert self._ahead is not None
        items = [item for _, item in records if item is not None]
        whole = self._first.transform is None  # the decode thread makes the Item: nothing is left to do here
        return _decode_all(self._ahead, items, slots, whole, self._stack)

    def _finish(self, group: _Group) -> Iterator[tuple[int, Any]]:
        """A group's records, in order, on the iterating thread: each error
        raised or reported, the transform applied."""
        decoded = group.value
        if type(decoded) is _Failed:
            raise decoded.error
        nth = 0
        first, stack = self._first, self._stack
        for position, item in group.records:
            if item is None:
                yield position, SKIPPED
                continue
            fused = self._settings()
            out = decoded[nth]
            nth += 1
            if fused is not first:  # a setting reassigned: decoded as the settings now say
                out = self.decode(item)
                if stack is not None and isinstance(out, Item):
                    out.stacking = stack
            elif type(out) is _Failed:
                out = self._failed(out)
            else:
                if self._decoded < SIZED or position % SIZED == 0:  # sampled: a tv_tensor's nbytes is a Python call
                    self._decoded += 1
                    self._bytes += _nbytes(out)
                if fused.transform is not None:  # else: the Item its thread made, as it is
                    out = apply_transform(fused.transform, out, item.path, item.offset, item.record)
            if stack is not None:  # a slot was asked for it
                if out is SKIPPED:
                    stack.skipped()
                else:
                    stack.came_out()
            yield position, out

    def _failed(self, failed: _Failed) -> Any:
        """A record whose decode on a thread raised: SKIPPED once reported under ``on_error``, else its error."""
        if self._report is None or not isinstance(failed.error, (CorruptRecordError, FeatureError)):
            raise failed.error
        self._report(failed.error)
        return SKIPPED


class _Failed(NamedTuple):
    """A record (or a group) whose decode raised ``error``."""

    error: BaseException


def _decode_all(decode: Callable[[Located], Any], items: list[Located], slots: list[Slot | None] | None,
                whole: bool, stacking: StackAhead | None) -> list[Any]:
    """Each item decoded, or the error its decode raised (the others still
    decoded); the large tensors of an item given a slot copied into it;
    ``whole`` (no transform): a dict made the :class:`Item` it comes out as,
    whose collate asks ``stacking`` (if any) for its batch's buffers."""
    out: list[Any] = []
    for k, item in enumerate(items):
        slot = slots[k] if slots is not None else None
        try:
            decoded = decoding_into(slot, decode, item)
        except Exception as e:
            out.append(_Failed(e))
            continue
        if slot is not None and type(decoded) is dict:
            slot.slab.place_record(slot.nth, decoded)
        if whole:
            decoded = as_item(decoded, (item.path, item.offset, item.record))
            if stacking is not None and isinstance(decoded, Item):
                decoded.stacking = stacking
        out.append(decoded)
    return out


def _nbytes(decoded: Any) -> int:
    """The bytes of a decoded record's tensors and arrays."""
    values = decoded.values() if isinstance(decoded, dict) else ()
    return sum(int(v.nbytes) for v in values if isinstance(v, (torch.Tensor, np.ndarray)))
