"""Memory for per-record and per-batch arrays that is used again once
nothing refers to it, not asked of malloc afresh each time.

YouTube-8M's frames joined per record (60-300 KiB) and the padded batches
``pad_collate`` makes of them (up to 10 MiB) are freed a batch at a time.
glibc gives the free top of its heap back to the kernel past its trim
threshold, and the next batch's arrays fault their pages in again, zeroed,
one trap per 4 KiB: with ``num_workers=0`` (the user's process, whose malloc
is not ours to tune) 8,000-35,000 faults per pass of 800 records, and
passes 2,700-4,400 records/s, against 5,000-6,400 with no faults (the same
script with glibc's thresholds raised by its environment variables).

:class:`Reused` hands out uninitialised arrays carved from a few buffers it
keeps, and carves from a buffer again only when no array made from it is
alive: ``torch.from_numpy`` keeps a NumPy array, and so the buffer it views,
alive for as long as any tensor, view or array made from it exists, so the
buffer's reference count says when every one of them is gone. Memory a caller
still holds is never handed out again. What it keeps: at most ``keep``
slabs and ``keep`` buffers of their own, none over ``largest`` bytes (larger
arrays are plain ``np.empty`` ones); a forked child starts with none.

In a DataLoader worker whose heap :mod:`~tfrecord_torch.data.workerheap`
tuned (:func:`malloc_keeps_memory`), malloc keeps freed memory itself and
the pools step aside: a worker forked for one epoch would otherwise fault a
few fresh slabs in before its first one is free again (10% slower per
epoch with 2 such workers on YouTube-8M frames, measured).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

import numpy as np

__all__ = ["Reused", "malloc_keeps_memory"]

ALIGN = 64  # each array starts on a cache line
_MALLOC_KEEPS = -1  # the pid whose malloc keeps its freed memory


def malloc_keeps_memory() -> None:
    """Say that this process's malloc keeps the memory it frees (its trim and
    mmap thresholds raised): every pool hands out plain arrays here."""
    global _MALLOC_KEEPS
    _MALLOC_KEEPS = os.getpid()


class Reused:
    """Uninitialised uint8 arrays from reused buffers; safe from several threads.

    Arrays of at most ``slab // 4`` bytes are carved one after another from
    a slab of ``slab`` bytes; larger ones get the start of a buffer of their
    own (a new one a quarter longer than asked, so that batches whose size
    changes use it again).

    Args:
        slab: bytes per slab.
        keep: slabs kept, and large buffers kept.
        largest: the largest buffer kept.
    """

    def __init__(self, slab: int = 8 << 20, keep: int = 4, largest: int = 64 << 20) -> None:
        self.slab, self.keep, self.largest = slab, keep, largest
        self._start()
        _ALL.add(self)

    def _start(self) -> None:
        self._lock = threading.Lock()
        self._slabs: list[np.ndarray] = []
        self._large: list[np.ndarray] = []
        self._current: np.ndarray | None = None
        self._offset = 0

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of ``nbytes``, uninitialised, that nothing else refers to."""
        if nbytes > self.largest or _MALLOC_KEEPS == os.getpid():
            return np.empty(nbytes, np.uint8)
        if nbytes > self.slab // 4:
            return self._take_large(nbytes)
        with self._lock:
            if self._current is None or self._offset + nbytes > self.slab:
                self._current, self._offset = self._free_slab(), 0
            out = self._current[self._offset:self._offset + nbytes]
            self._offset += -(-max(nbytes, 1) // ALIGN) * ALIGN
            return out

    def _free_slab(self) -> np.ndarray:
        """(under the lock) A kept slab no array is made from, else a new one (kept if room)."""
        self._current = None  # its own reference gone: it is free once its arrays are
        for slab in self._slabs:
            if sys.getrefcount(slab) == 3:  # the list, this loop, the argument
                return slab
        slab = np.empty(self.slab, np.uint8)
        if len(self._slabs) < self.keep:
            self._slabs.append(slab)
        return slab

    def _take_large(self, nbytes: int) -> np.ndarray:
        with self._lock:
            for buffer in self._large:
                if buffer.size >= nbytes and sys.getrefcount(buffer) == 3:
                    return buffer[:nbytes]
            buffer = np.empty(min(nbytes + nbytes // 4, self.largest), np.uint8)
            if len(self._large) < self.keep:
                self._large.append(buffer)
            else:  # the shortest free one makes way for it: later batches fit this one
                # by index: list.remove would compare the arrays element by element
                free = [k for k in range(len(self._large)) if sys.getrefcount(self._large[k]) == 2]
                if free:
                    del self._large[min(free, key=lambda k: self._large[k].size)]
                    self._large.append(buffer)
            return buffer[:nbytes]

    def trim(self, nbytes: int) -> None:
        """Forget kept buffers and slabs, the newest first, until those kept
        hold at most ``nbytes``; one an array still refers to stays the
        holder's until they let go of it (it is not handed out again)."""
        with self._lock:
            self._current = None  # carved again from a kept slab (or a new one) next time
            kept = sum(int(buffer.nbytes) for buffer in (*self._large, *self._slabs))
            for held in (self._large, self._slabs):
                while held and kept > nbytes:
                    kept -= int(held.pop().nbytes)


_ALL: weakref.WeakSet[Reused] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child: every pool starts empty, with a lock no thread of
    the parent can have been holding."""
    for pool in list(_ALL):
        pool._start()


os.register_at_fork(after_in_child=_forked)
