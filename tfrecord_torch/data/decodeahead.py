"""The per-sample path's decoding: records to items, in order.

Where a process has cores to spare (``num_workers=0``, or fewer DataLoader
workers than cores) and the records hold something slow to decode (images),
the records are decoded on the iteration's decode threads ahead of the one
taken (up to :data:`AHEAD_BYTES` of them: a batch or more of images, so the
threads decode while the loop steps), while the iterating thread collates. Everything whose
order is seen stays on the iterating thread, in the records' order: the
dataset's ``transform`` (which may draw from torch's global generator),
errors raised or reported under ``on_error``, and the positions that resume
counts. A record kind that cannot be decoded away from that order (a fused
crop's draws, a ``Payload`` hook, a feature kind defined outside the package)
is decoded on the iterating thread, as is every record when one thread is
all the process has (:func:`~tfrecord_torch.features.images.engine.default_threads`).

In the main process, with no transform, the decode threads also copy each
record's images into its slot of its batch's buffer, so that the collate of
``DataLoader(ds, batch_size=B)`` copies nothing on the loop's thread
(:mod:`~tfrecord_torch.data.stackahead`).

Each hand-over to a thread costs the iterating thread a future and a wake-up,
Python that holds the GIL the threads need too, so once the records' size is
known small ones go in groups: about :data:`GROUP_BYTES`
decoded, at most :data:`GROUP_RECORDS`; a record whose decode fails in a
group leaves the others of its group decoded, and its error comes where it
stands.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

from tfrecord_torch._threads import OwnedPool
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
GROUP_BYTES = 4 << 20  # records handed to a decode thread at once: about this many bytes decoded
GROUP_RECORDS = 32  # and at most this many
SIZED = 64  # the records whose size the mean counts: the first 64, then every 64th


class _Group(NamedTuple):
    """Records handed to a decode thread at once, in order, as ``(position,
    item)`` (item None: a record the read left out); ``value`` decodes the
    items that are not None, in order (None: every one was left out)."""

    records: list[tuple[int, Located | None]]
    value: Future | None


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
        self._stack = StackAhead() if self._threads > 1 and self._first.transform is None and not in_worker else None

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
        if self._threads == 1:
            for position, item in items:
                yield position, SKIPPED if item is None else self.decode(item)
            return
        yield from self._on_threads(iter(items))

    def _on_threads(self, source: Iterator[tuple[int, Located | None]]) -> Iterator[tuple[int, Any]]:
        """:meth:`each` with decode threads: the records held ahead in groups
        handed over to them, each group's out in order once it is taken."""
        pool = OwnedPool(self._threads, "tfrecord-decode")
        window: deque[_Group] = deque()  # handed over, not yet out
        group: list[tuple[int, Located | None]] = []  # read, not yet handed to a thread
        held = 0  # records in the window
        sized, depth, size = -1, 0, 1  # the records sized when depth and size were worked out

        def hand_over() -> None:
            nonlocal held
            if group:
                window.append(self._start(pool, group))
                held += len(group)
                group.clear()

        try:
            while True:
                try:
                    group.append(next(source))
                except StopIteration:
                    break
                except Exception:  # a read's error: the records read before it come out first
                    hand_over()
                    while window:
                        yield from self._finish(window.popleft())
                    raise
                if sized != self._decoded:  # the mean size moved: the depth falls once it is known
                    sized = self._decoded
                    depth = self._depth()
                    size = self._group(depth)
                if len(group) >= size:
                    hand_over()
                while held + len(group) >= depth:
                    if not window:
                        hand_over()
                    done = window.popleft()
                    held -= len(done.records)
                    yield from self._finish(done)
            hand_over()
            while window:
                yield from self._finish(window.popleft())
        finally:
            for started in window:
                if started.value is not None:
                    started.value.cancel()
            pool.close()  # the records decoding finish first
            if self._stack is not None:
                self._stack.close()

    def _group(self, depth: int) -> int:
        """Records handed to a thread at once: :data:`GROUP_BYTES` of records
        of the mean size so far (each hand-over costs the iterating thread a
        future), at most :data:`GROUP_RECORDS` and a share of ``depth`` that
        leaves every thread two groups, at least 1."""
        if not self._decoded:
            return 1
        mean = max(self._bytes // self._decoded, 1)
        return max(1, min(GROUP_RECORDS, GROUP_BYTES // mean, depth // (2 * self._threads)))

    def _start(self, pool: OwnedPool, group: list[tuple[int, Located | None]]) -> _Group:
        assert self._ahead is not None
        items = [item for _, item in group if item is not None]
        slots = [self._stack.slot() for _ in items] if self._stack is not None else None
        whole = self._first.transform is None  # the decode thread makes the Item: nothing is left to do here
        value = pool.submit(_decode_all, self._ahead, items, slots, whole) if items else None
        return _Group(list(group), value)

    def _finish(self, group: _Group) -> Iterator[tuple[int, Any]]:
        """A group's records, in order, on the iterating thread: each error
        raised or reported, the transform applied."""
        decoded: list | None = None
        nth = 0
        stack = self._stack
        for position, item in group.records:
            if item is None:
                yield position, SKIPPED
                continue
            fused = self._settings()
            if fused is not self._first:  # a setting reassigned: decoded as the settings now say
                if group.value is not None:
                    group.value.cancel()
                out = self.decode(item)
            else:
                if decoded is None:
                    assert group.value is not None
                    decoded = group.value.result()
                out = self._value(decoded[nth], position, item, fused)
            nth += 1
            if stack is not None:  # a slot was asked for it
                if out is SKIPPED:
                    stack.skipped()
                else:
                    stack.came_out()
                    if isinstance(out, Item):
                        out.stacking = stack
            yield position, out

    def _value(self, decoded: Any, position: int, item: Located, fused: PerSample) -> Any:
        """A record decoded on a thread as the item it gives (SKIPPED: reported)."""
        if type(decoded) is _Failed:
            if self._report is None or not isinstance(decoded.error, (CorruptRecordError, FeatureError)):
                raise decoded.error
            self._report(decoded.error)
            return SKIPPED
        if self._decoded < SIZED or position % SIZED == 0:  # sampled: a tv_tensor's nbytes goes through __torch_function__
            self._decoded += 1
            self._bytes += _nbytes(decoded)
        if fused.transform is None:
            return decoded  # made an Item on its thread (_decode_all)
        return apply_transform(fused.transform, decoded, item.path, item.offset, item.record)


class _Failed(NamedTuple):
    """A record whose decode raised ``error``."""

    error: Exception


def _decode_all(decode: Callable[[Located], Any], items: list[Located], slots: list[Slot | None] | None,
                whole: bool) -> list[Any]:
    """Each item decoded, or the error its decode raised (the others still
    decoded); the large tensors of an item given a slot copied into it;
    ``whole`` (no transform): a dict made the :class:`Item` it comes out as."""
    out: list[Any] = []
    for k, item in enumerate(items):
        slot = slots[k] if slots is not None else None
        try:
            decoded = decoding_into(slot, decode, item)
        except Exception as e:
            out.append(_Failed(e))
            continue
        if slot is not None and type(decoded) is dict:
            for key, value in decoded.items():
                placed = slot.slab.place(key, slot.nth, value)
                if placed is not None:
                    decoded[key] = placed
        out.append(as_item(decoded, (item.path, item.offset, item.record)) if whole else decoded)
    return out


def _nbytes(decoded: Any) -> int:
    """The bytes of a decoded record's tensors and arrays."""
    values = decoded.values() if isinstance(decoded, dict) else ()
    return sum(int(v.nbytes) for v in values if isinstance(v, (torch.Tensor, np.ndarray)))
