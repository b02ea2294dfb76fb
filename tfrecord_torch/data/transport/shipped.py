"""Shared-memory batch buffers that a DataLoader worker uses again.

A DataLoader worker sends each batch to the main process through shared
memory. A fresh segment per batch costs the kernel one page fault per 4 KiB
when the decode threads first write it: about 11 ms for a batch of 64
256x256 RGB images here, more than half the time those images take to
decode on one core. A worker cannot tell by itself when the main process has
let go of a batch, so the two keep count together:

- the worker keeps a few segments (:class:`SharedBuffers`) and one small
  shared array of flags, one per segment, that only it sets (to 1, when the
  batch is pickled for the main process) and only the receiver clears;
- the batch's image tensor is a :class:`Shipped` tensor whose pickling sends
  the segment itself (no copy) with its flag array and slot the first time,
  and afterwards only the segment's key (worker pid, serial) and where the
  batch lies in it: torch passes a segment as a file descriptor, a socket
  round trip with the worker (whose resource-sharer thread must first get
  the worker's GIL), so the receiver keeps each segment mapped (:class:`_Mapped`)
  until the worker names it retired with its next new segment, or is gone;
- in the receiving process the batch arrives as a plain tensor over the
  segment, made through a NumPy array that every tensor, view or array made
  from the batch keeps alive (the rule of :mod:`.reuse`), its storage moved
  into torch's shared memory or not (:mod:`~tfrecord_torch._storage`); a finalizer on it
  clears the segment's flag the moment the last of them goes;
- the batch's small tensors (labels; :func:`inline_small`) travel by value.

A segment is written again only when its flag is clear and the worker itself
holds no reference to it. A ``Shipped`` tensor is sent once: pickled again
(say by a ``collate_fn`` of the user's that sends it elsewhere), it sends a
copy. Views and results of operations on it are plain tensors, which torch
copies into shared memory of their own as usual. A batch lost on the way (a
worker stopped mid-epoch) keeps its segment's flag set, so that segment is
never written again; the worker allocates others. A worker forked after
another is gone takes up that worker's segments, still mapped here, instead
of making new ones (:mod:`.spares`).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import mmap
import os
import sys
import threading
import weakref
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.utils.data

from tfrecord_torch._storage import tensor_over
from tfrecord_torch.data.transport.spares import Spare, Spares, _alive

__all__ = ["Inline", "Layout", "SharedBuffers", "Shipped", "inline_small", "sent_over"]

_SENDING = threading.Lock()
_SERIALS = itertools.count()  # a segment's key is (pid, serial)
_RETIRED: list[tuple[int, int]] = []  # keys of segments let go here, for the receiver to let go too


def _retire(keys: list[tuple[int, int]]) -> None:
    with _SENDING:
        _RETIRED.extend(k for k in keys if k[0] == os.getpid())
        keys.clear()


def _take_retired() -> list[tuple[int, int]]:
    """(under _SENDING)"""
    out = list(_RETIRED)
    _RETIRED.clear()
    return out
SLOTS = 6  # segments a worker keeps: batches queued (prefetch_factor 2), held and not yet seen released


class Shipped(torch.Tensor):
    """A batch tensor over a worker's reusable segment; pickled, it sends the
    segment and its slot (once), and arrives as a plain tensor."""

    # operations on it give plain tensors (copied into shared memory as usual if sent)
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    _segment: torch.Tensor
    _flags: torch.Tensor
    _slot: int
    _sent: bool

    def __reduce_ex__(self, protocol: Any) -> Any:
        plain = self.as_subclass(torch.Tensor)
        segment = getattr(self, "_segment", None)
        with _SENDING:
            # still over the segment: torch moves a storage into new shared memory when a plain
            # view of it is sent first, and then this tensor no longer lies in the segment
            first = segment is not None and not self._sent and _within(plain, segment)
            if first:
                self._sent = True
        if segment is None or not first:
            return (_copied, (plain.clone(memory_format=torch.preserve_format),))
        offset = (plain.data_ptr() - segment.data_ptr()) // plain.element_size()
        return sent_over(segment, self._flags, self._slot, Layout(tuple(plain.shape), tuple(plain.stride()), offset))


def sent_over(segment: torch.Tensor, flags: torch.Tensor, slot: int, layout: Layout) -> tuple:
    """What pickles ``layout`` of a pool's ``segment`` (taken with ``slot``)
    for the receiver: the segment itself the first time (a file descriptor,
    passed over a socket), its key afterwards. Sets the slot's flag: the
    segment is not written again until the receiver let go of what arrives."""
    with _SENDING:
        flags[slot] = 1  # set before the receiver can see the batch; cleared there
        announce = not getattr(segment, "_announced", True)
        segment._announced = True  # type: ignore[attr-defined]
        retired = _take_retired() if announce else []
    if announce:
        return (_announced, (segment._key, segment, flags, slot, layout, retired))  # type: ignore[attr-defined]
    return (_known, (segment._key, slot, layout))  # type: ignore[attr-defined]


class Layout(NamedTuple):
    """Where a batch lies in its segment (in elements)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def _within(tensor: torch.Tensor, segment: torch.Tensor) -> bool:
    """Whether every element of ``tensor`` lies in ``segment``'s memory."""
    start, size = segment.data_ptr(), segment.numel() * segment.element_size()
    last = sum((n - 1) * st for n, st in zip(tensor.shape, tensor.stride())) if tensor.numel() else 0
    return start <= tensor.data_ptr() and tensor.data_ptr() + (last + 1) * tensor.element_size() <= start + size


def _copied(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


INLINE_BYTES = 1 << 16  # smaller tensors of a worker's batch travel inside the message


class Inline(torch.Tensor):
    """A small tensor of a worker's batch (labels, sizes); pickled, it sends
    its bytes by value, as NumPy does, not a fresh shared-memory segment
    passed as a file descriptor (a socket round trip with the worker)."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (tensor_over, (self.as_subclass(torch.Tensor).numpy().copy(),))


def inline_small(batch: Any) -> Any:
    """``batch`` with the small tensors of a dict marked :class:`Inline`, in a
    DataLoader worker; elsewhere, or for other values, ``batch`` as it is."""
    if not isinstance(batch, dict) or torch.utils.data.get_worker_info() is None:
        return batch
    return {k: _inline(v) for k, v in batch.items()}


def _inline(value: Any) -> Any:
    if type(value) is not torch.Tensor or value.nbytes > INLINE_BYTES or value.requires_grad or \
            value.device.type != "cpu":
        return value
    try:
        value.numpy()
    except (TypeError, RuntimeError):  # a dtype NumPy lacks (bfloat16, complex32, ...)
        return value
    return value.as_subclass(Inline)


class _Released:
    """In a receiving process: each batch received over a reusable segment
    clears its flag the moment nothing refers to it any more."""

    def receive(self, view: torch.Tensor, flags: torch.Tensor, slot: int) -> torch.Tensor:
        array = view.numpy()
        # every tensor, view or array made from the batch keeps ``array`` alive, so its end is the
        # moment the receiver lets go of the whole batch: the sender may write the segment again
        # from then on, not only once the receiver takes another batch (a worker starting an epoch
        # then needs fewer segments, each a page fault per 4 KiB when first written)
        weakref.finalize(array, _release, flags, slot).atexit = False  # at exit no worker writes again
        return tensor_over(array)  # moved into torch's shared memory (share_memory_(), sent on), it still holds array


def _release(flags: torch.Tensor, slot: int) -> None:
    flags[slot] = 0


_RELEASED = _Released()


class _Mapped:
    """In a receiving process: each sender's segments, mapped once, by key
    (sender pid, serial). A sender names the segments it let go with its next
    new one; the segments of senders gone are let go too."""

    def __init__(self) -> None:
        self._segments: dict[tuple[int, int], Spare] = {}
        self._lock = threading.Lock()

    def announce(self, key: tuple[int, int], segment: torch.Tensor, flags: torch.Tensor, slot: int,
                 retired: list[tuple[int, int]]) -> None:
        with self._lock:
            gone = set(map(tuple, retired))
            stale = [k for k in self._segments if k in gone or not _alive(k[0])]
            for k in stale:
                del self._segments[k]
            self._segments[key] = Spare(key, segment, flags, slot)

    def held(self) -> list[Spare]:
        """The segments mapped here: in a worker forked from this process, the
        spares it may take up (:mod:`.spares`)."""
        return list(self._segments.values())

    def get(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        with self._lock:
            found = self._segments.get(key)
        if found is None:
            raise RuntimeError(
                f"a batch arrived over a shared-memory segment (sender {key[0]}, segment {key[1]}) that this process "
                "never received: the batch that carried it went to another process. A batch of a DataLoader "
                "worker is sent once, to the main process; pickle a copy (batch.clone()) to send it elsewhere")
        return found.segment, found.flags


_MAPPED = _Mapped()
_SPARES = Spares()


def _view(segment: torch.Tensor, layout: Layout) -> torch.Tensor:
    return segment.as_strided(layout.shape, layout.stride, layout.offset)


def _announced(key: tuple[int, int], segment: torch.Tensor, flags: torch.Tensor, slot: int,
               layout: Layout, retired: list[tuple[int, int]]) -> torch.Tensor:
    """Unpickled in the receiving process, a segment's first batch: the segment
    is kept mapped for the batches after it; the batch as a plain tensor."""
    _MAPPED.announce(key, segment, flags, slot, retired)
    return _RELEASED.receive(_view(segment, layout), flags, slot)


def _known(key: tuple[int, int], slot: int, layout: Layout) -> torch.Tensor:
    """Unpickled in the receiving process, a later batch over a segment it holds
    mapped: no file descriptor passed."""
    segment, flags = _MAPPED.get(key)
    return _RELEASED.receive(_view(segment, layout), flags, slot)


class SharedBuffers:
    """Reusable shared-memory arrays for one process's batches; safe from
    several threads. A fresh instance of state after a fork."""

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self._pid = -1
        self._lock = threading.Lock()
        self._flags: torch.Tensor | None = None
        self._segments: list[tuple[torch.Tensor, np.ndarray] | None] = []
        self._longest: dict[np.dtype, int] = {}  # per dtype, the longest segment a grow take made
        self.reused = self.allocated = self.adopted = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype | type, zero: bool, *, grow: bool = False
             ) -> tuple[torch.Tensor, Any]:
        """A shared-memory tensor of ``shape`` no one refers to (zero-filled
        if ``zero``), and what :meth:`ship` needs to send it again later.

        A free segment of ``dtype`` at least as long serves (its start): the
        last, shorter batch of an epoch goes into one of the full batches'
        segments, which the next epoch's first batches use again (a segment
        made for the short batch instead replaced one of them, and the next
        epoch faulted a new one in: 2 x 36 MB a worker each epoch of 500x375
        images, a quarter of the workers' time per image in those epochs).

        ``grow``: a new segment is flat, a quarter longer than asked and no
        shorter than the longest made before, so that batches whose shapes
        differ (padded to each batch's longest) use the same segments again."""
        dtype = np.dtype(dtype)
        numel = int(np.prod(shape))

        def fits(array: np.ndarray) -> bool:
            return array.dtype == dtype and array.size >= numel

        def batch(array: np.ndarray) -> np.ndarray:  # the tensor's part of a segment
            return array.reshape(-1)[:numel].reshape(shape)

        with self._lock:
            flags = self._flags_here()
            # the sender's references first: it sets the flag (sending) before it lets go, so a flag
            # read before them may be one of a batch sent and let go in between
            free = [k for k in range(self.slots) if self._unheld(k) and int(flags[k]) == 0]
            for k in free:
                held = self._segments[k]
                if held is not None and fits(held[1]):
                    self.reused += 1
                    array = batch(held[1])
                    if zero:
                        array.fill(0)
                    return torch.from_numpy(array), (held[0], flags, k)
            made = tuple(shape)
            if grow:  # no shorter than the longest made before (retired ones too): later batches fit it
                made = (max(numel + numel // 4, self._longest.get(dtype, 0)),)
                self._longest[dtype] = made[0]
            # an empty slot before one whose segment a later batch may fit
            free.sort(key=lambda k: self._segments[k] is not None)
            slot = free[0] if free else None
            spare = None if slot is None else _SPARES.take(_MAPPED.held(), dtype, int(np.prod(made)))
            segment, array = self._new_segment(made, dtype, slot, spare)
            if spare is not None and zero:
                array.fill(0)
            return torch.from_numpy(batch(array)), (segment, flags, slot) if slot is not None else None

    def _flags_here(self) -> torch.Tensor:
        """(under the lock) This process's flags; a fresh state after a fork."""
        if self._pid != os.getpid():
            self._pid, self._segments = os.getpid(), [None] * self.slots
            self._keys: list[tuple[int, int]] = []
            weakref.finalize(self, _retire, self._keys)  # the receiver lets go of them too
            self._flags = _shared(torch.zeros(self.slots, dtype=torch.int32))
            self._longest = {}
            self.reused = self.allocated = self.adopted = 0
        assert self._flags is not None
        return self._flags

    def _new_segment(self, shape: tuple[int, ...], dtype: np.dtype, slot: int | None,
                     spare: torch.Tensor | None = None) -> tuple[torch.Tensor, np.ndarray]:
        """(under the lock) A new segment, or ``spare`` taken up (a segment
        of a worker gone, :mod:`.spares`), kept in ``slot`` (the segment there
        retired) if given; untracked otherwise."""
        if spare is None:
            segment = _shared(torch.empty(0, dtype=torch.from_numpy(np.empty(0, dtype)).dtype), shape)
            self.allocated += 1
        else:
            segment = spare  # as its sender made it: a batch lies in its start, as in a longer segment's
            # its pages are in memory, but not in this new process's page tables: mapped in one call,
            # not a trap per 4 KiB as the batch is written (a 151 MiB segment: 11 ms, not 48)
            _populate(segment.data_ptr(), segment.untyped_storage().nbytes(), allocated=True)
            self.adopted += 1
        array = segment.numpy()
        if slot is not None:
            segment._key = (self._pid, next(_SERIALS))  # type: ignore[attr-defined]
            segment._announced = False  # type: ignore[attr-defined]
            old = self._segments[slot]
            if old is not None:
                _retire([old[0]._key])  # type: ignore[attr-defined]
                _SPARES.let_go(old[0])
            self._keys.append(segment._key)  # type: ignore[attr-defined]
            self._segments[slot] = (segment, array)
        return segment, array

    def _unheld(self, k: int) -> bool:
        held = self._segments[k]
        # the tuple and getrefcount's argument: no tensor made from the array is alive
        return held is None or sys.getrefcount(held[1]) == 2

    @staticmethod
    def ship(batch: torch.Tensor, token: Any) -> torch.Tensor:
        """``batch`` (a view of the taken tensor) as a :class:`Shipped` tensor."""
        if token is None:
            return batch
        out = batch.as_subclass(Shipped)
        out._segment, out._flags, out._slot = token
        out._sent = False
        return out


def _shared(empty: torch.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``empty`` (zeros) moved to shared memory, or a new shared tensor of ``shape``
    (zero-filled: a new segment reads as zeros, its pages already in) with ``empty``'s dtype."""
    if shape is None:
        return empty.share_memory_()
    numel = int(np.prod(shape))
    storage = torch.UntypedStorage._new_shared(numel * empty.element_size())
    _populate(storage.data_ptr(), storage.nbytes())
    return torch.empty(0, dtype=empty.dtype).set_(storage).view(tuple(shape))


# Linux 5.14+; older kernels answer EINVAL and the pages fault in as written
_MADV_POPULATE_READ, _MADV_POPULATE_WRITE = 22, 23


def _populate(address: int, length: int, *, allocated: bool = False) -> None:
    """Fault a segment's pages in with one call, before the batch is
    written into it.

    A new segment (``allocated`` false): written page by page, a batch of
    64 1024x768 RGB images (151 MiB) took 0.9-1.0 s here, 0.22 s once its
    pages were in; madvise(MADV_POPULATE_WRITE) brings them in in 0.5-0.6 s
    (the kernel still zeroes each page, without a trap per 4 KiB). A worker
    makes a new segment for each of its first batches of an epoch (those
    still held or queued are not written again), so a short epoch pays this
    for most of its batches.

    A segment whose pages exist (``allocated``: one another process made,
    taken up by a worker forked since) needs only this process's page
    tables. MADV_POPULATE_READ maps them 16 pages to a fault (the kernel's
    fault-around), writable in a shared mapping of shared memory: 11 ms for
    151 MiB here, and the batch then writes with no fault, where
    MADV_POPULATE_WRITE takes a fault a page (31-37 ms) and writing page by
    page 48 ms."""
    madvise = _madvise()
    if madvise is None or length == 0:
        return
    start = address & ~(mmap.PAGESIZE - 1)
    advice = _MADV_POPULATE_READ if allocated else _MADV_POPULATE_WRITE
    madvise(start, length + (address - start), advice)  # a failure: pages fault in as written


@functools.cache
def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover - a libc without madvise
        return None
    madvise.argtypes, madvise.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return madvise
