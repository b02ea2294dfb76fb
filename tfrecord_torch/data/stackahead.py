"""Batches stacked where the per-sample path decodes: on the main process's
decode threads, and in a DataLoader worker into the shared memory its batch
is sent in.

``DataLoader(ds, batch_size=B)`` with ``num_workers=0`` stacks each batch's
images in ``next()``, on the loop's own thread: B images copied (12.5 MB for
64 256x256 images) while the training step waits, from memory the decode
threads wrote a batch or more before (out of the caches by then). In the
loop benchmark that copy was half the loop's wait per batch.

Here the decode thread that decodes a record also copies each of its large
tensors into that record's *slot* of one buffer per batch (a *slab*), right
after decoding it, and the item holds a view of its slot. default_collate
of B items that are, in order, every slot of one slab gives the slab itself
(:meth:`StackAhead.whole`): the loop's thread copies nothing.

The slots follow the order the records are handed to the decode threads,
which is the order the items come out, counted from the iteration's first
item, less the records skipped before (known once they come out), so slab k
holds the items kB to kB+B-1 as the DataLoader groups them. B is what the
collate of this iteration's items says (:meth:`StackAhead.told`; the first
records, handed over before the first batch is collated, get no slot: the
process's last batch size is a guess until then).

Whatever does not line up is stacked as before, with the same values: a
batch of items from two slabs (after a skipped record, until the records
handed over before it are out), a transform (none are placed), a tensor
that is small, not contiguous, of another shape than its slab's first, or
of a type with attributes (boxes). A slot is given once: a slab's slots
are counted up, never given again, so no record is written over another's
pixels. A slab's buffers are used again, by later slabs of the iteration
and of the next ones, once nothing refers to them
(:class:`~tfrecord_torch.features.reused.Reused`: no batch, item or view
of them alive): fresh memory faulted its pages in, a third more CPU per
batch. An iteration that ends leaves the next up to :data:`KEPT_BETWEEN`
bytes of them. An item kept alone keeps its batch's buffer. The iteration
lets go of a slab once its batch came out, collated or not; items iterated
with no DataLoader (a batch's worth came out and no collate told B) get no
more slots.

In a DataLoader worker with one core (as many workers as cores, the usual
spelling; no decode threads) the same slots lie in shared memory (a pool of
segments, :class:`~tfrecord_torch.data.transport.shipped.SharedBuffers`),
filled on its iterating thread; a batch that is every slot of its slab is sent as that segment
(:class:`~tfrecord_torch.data.transport.shipped.Shipped`), which the worker
writes again once the main process let go of the batch. Where a worker
would otherwise stack each batch of 64 1024x768 images (151 MiB) into its
segment, it copies nothing; and a worker forked for a pass decodes into the
last pass's segments (:mod:`~tfrecord_torch.data.transport.spares`), whose
pages are in memory, not into fresh heap faulted in page by page. The batch
size a worker's collate told is kept in a page shared with the processes
forked after the main process imported this module, so that workers forked
for the next pass give their first batches slots too. An item that leaves
the worker by itself (``batch_size=None``, or kept by a ``collate_fn`` of the
user's) is no concern of the segment's: its tensor's storage is its slot's
own, not shared, and torch copies a storage into shared memory of its own
when it pickles it, so the worker writing the segment again changes nothing
the main process holds. Without a collate, slots stop after a batch's worth
of items (as in the main process).
"""

from __future__ import annotations

import functools
import itertools
import mmap
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from tfrecord_torch._dtypes import numpy_dtype
from tfrecord_torch._storage import tensor_over
from tfrecord_torch.data.transport.shipped import SLOTS, SharedBuffers
from tfrecord_torch.data.transport.stacking import stacks_to_plain
from tfrecord_torch.features.images.jpeg import planes_into
from tfrecord_torch.features.reused import Reused

__all__ = ["PLACED_BYTES", "Slot", "StackAhead", "decoding_into"]

PLACED_BYTES = 64 << 10  # a tensor this large or larger goes into its slot; smaller ones are stacked as before

KEPT = 12  # buffers kept to use again: the batches held ahead (64 MiB of records) and the loop's
LARGEST = 256 << 20  # the largest buffer kept, as the loop thread's stacking keeps (64 1024x768 images: 151 MiB)
KEPT_BETWEEN = 256 << 20  # of those, the bytes kept from an iteration's end for the next one

# The slabs' memory in the main process: used again by the next iteration (a forked child starts with none)
_MEMORY = Reused(slab=1 << 20, keep=KEPT, largest=LARGEST)  # slab: carved, for small batches only
# In a DataLoader worker, shared memory the batch is sent in: a segment used again once the main process
# let go of its batch (a forked worker takes up the last one's, :mod:`.transport.spares`); a slab may
# hold two large keys (an image and its mask)
_SHARED = SharedBuffers(2 * SLOTS)


class _LastSize:
    """The last batch size a collate of items told, in this process and the
    processes forked from it (a guess for the next iteration's slots): the
    main process's collate (``num_workers=0``) or a worker's. Held in a page
    shared with the processes forked after it was made (at import, in the
    main process), where the main process sees what its workers told, so
    that workers forked for the next pass slot their first batch too. A
    spawned process has its own."""

    def __init__(self) -> None:
        try:
            self._cell: mmap.mmap | None = mmap.mmap(-1, 8)  # MAP_SHARED | MAP_ANONYMOUS: no file, no descriptor
        except (OSError, ValueError):  # pragma: no cover - a platform with no anonymous shared mapping
            self._cell = None
        self._here = 0

    def get(self) -> int:
        if self._cell is None:
            return self._here
        return int.from_bytes(self._cell[:8], "little")

    def set(self, size: int) -> None:
        self._here = size
        if self._cell is not None:
            self._cell[:8] = size.to_bytes(8, "little")  # one 8-byte store: a reader sees a size told


_LAST_SIZE = _LastSize()


class _HeapSlabs:
    """Slab buffers of the main process's reused memory, handed over as they are."""

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
        nbytes = int(np.prod(shape)) * dtype.itemsize
        # moved into shared memory (share_memory_()), the batch still holds the slab's memory (_storage)
        return tensor_over(_MEMORY.take(nbytes)).view(dtype).view(shape), None

    @staticmethod
    def ship(buffer: torch.Tensor, token: Any) -> torch.Tensor:
        return buffer

    @staticmethod
    def close() -> None:
        _MEMORY.trim(KEPT_BETWEEN)


class _SharedSlabs:
    """Slab buffers of a DataLoader worker: segments of shared memory, each
    batch sent as a :class:`~.transport.shipped.Shipped` tensor over its
    slab's buffer (nothing copied to send it)."""

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
        as_numpy = numpy_dtype(dtype)
        assert as_numpy is not None  # _placeable: a dtype NumPy has
        return _SHARED.take(shape, as_numpy, zero=False)

    @staticmethod
    def ship(buffer: torch.Tensor, token: Any) -> torch.Tensor:
        return SharedBuffers.ship(buffer, token)

    @staticmethod
    def close() -> None:
        pass  # the pool keeps its segments (at most its slots) for the next batches


class Slot(NamedTuple):
    """Where one record's large tensors go: the ``nth`` slot of ``slab``."""

    slab: _Slab
    nth: int


class _Slab:
    """One batch's buffers, one a key, each made by the first record placed
    in it (the shape and dtype of its value, ``size`` of them); and the one
    a JPEG decoder writes RGB planes into (:meth:`planes_slot`), the buffer
    of the first key whose values are found there (its *owner*).

    A record's first JPEG of the planes' shape is decoded into the planes,
    whichever key it is: in a record with two images of one size whose
    owner's image is a PNG this time, the other key's pixels lie in the
    owner's slot. :meth:`place_record` copies them out before the owner's
    value is copied in over them."""

    __slots__ = ("_lock", "_memory", "_owner", "_planes", "_planes_buffer", "_tokens", "claimed", "size", "tensors")

    def __init__(self, size: int, memory: _HeapSlabs | _SharedSlabs) -> None:
        self.size, self._memory = size, memory
        self.claimed: set[int] = set()  # slots given (on the iterating thread only)
        self.tensors: dict[str, torch.Tensor] = {}
        self._planes: np.ndarray | None = None
        self._planes_buffer: torch.Tensor | None = None  # the tensor ``_planes`` views (the owner's buffer)
        self._owner: str | None = None  # the key whose buffer the planes are
        self._tokens: dict[int, Any] = {}  # a buffer's address -> what sends it (its memory's ship)
        self._lock = threading.Lock()

    def planes_slot(self, index: int, shape: tuple[int, int, int]) -> np.ndarray | None:
        """Slot ``index`` of the planes buffer, for a JPEG decoded to planes of
        ``shape`` (:func:`~tfrecord_torch.features.images.jpeg.planes_into`);
        None for a shape other than the first one's, or planes too small to
        be placed (:data:`PLACED_BYTES`: they are stacked as before)."""
        if shape[0] * shape[1] * shape[2] < PLACED_BYTES:
            return None
        with self._lock:
            if self._planes is None:
                self._planes_buffer = self._empty((self.size, *shape), torch.uint8)
                self._planes = self._planes_buffer.numpy()
        return self._planes[index] if self._planes.shape[1:] == shape else None

    def place_record(self, index: int, decoded: dict) -> None:
        """Each value of one record's ``decoded`` dict (slot ``index``) placed
        in its slot where it fits (:meth:`place`), replaced there by its
        view. The value decoded into the planes goes first: where the planes
        are another key's buffer, that key's value is copied in over it
        next, so it is copied out to its own slot (or its own memory) first."""
        with torch._C.DisableTorchFunctionSubclass():
            at = None if self._planes is None else self._planes[index].ctypes.data
            resident = [k for k, v in decoded.items() if isinstance(v, torch.Tensor) and v.data_ptr() == at]
        for key in [*resident, *(k for k in decoded if k not in resident)]:
            value = decoded[key]
            placed = self.place(key, index, value)
            if placed is not None:
                decoded[key] = placed
            elif key in resident:  # where the planes' owner (now, or a later record's key) writes
                decoded[key] = value.clone()

    def place(self, key: str, index: int, value: torch.Tensor) -> torch.Tensor | None:
        """``value`` in slot ``index`` of ``key``'s buffer, as a view of the same
        type, shape and strides: as it is if it was decoded there, else
        copied in; None where it does not fit there."""
        with torch._C.DisableTorchFunctionSubclass():  # tv_tensors' attributes, a Python call each otherwise
            buffer = self.tensors.get(key)
            if buffer is not None and _in_slot(value, buffer, index):
                return value  # decoded into its slot (the usual case, kept short: it runs once a record)
            if not _placeable(value):
                return None
            with self._lock:
                buffer = self.tensors.get(key)
                if buffer is None:
                    made = self._planes_buffer
                    if made is not None and self._owner is None and _in_slot(value, made, index):
                        self._owner = key  # decoded into the planes: they are this key's buffer
                    else:
                        made = self._empty((self.size, *value.shape), value.dtype)
                    buffer = self.tensors[key] = made
            if _in_slot(value, buffer, index):
                return value  # decoded into the planes buffer this key just took
            if buffer.shape[1:] != value.shape or buffer.dtype != value.dtype:
                return None
            slot = buffer[index]
            np.copyto(slot.numpy(), value.numpy())  # NumPy: on this thread, not torch's OpenMP team
        return slot if type(value) is torch.Tensor else slot.as_subclass(type(value))

    def _empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """(the lock held) An uninitialised tensor over memory no batch, item or view refers to."""
        out, token = self._memory.empty(shape, dtype)
        self._tokens[out.data_ptr()] = token
        return out

    def shipped(self, buffer: torch.Tensor) -> torch.Tensor:
        """``buffer`` (one of this slab's) as the collate gives it: in a
        worker, sent over its segment."""
        return self._memory.ship(buffer, self._tokens.get(buffer.data_ptr()))


_DATA_PTR, _SIZE, _STRIDE = torch._C.TensorBase.data_ptr, torch._C.TensorBase.size, torch._C.TensorBase.stride
_DTYPE = torch._C.TensorBase.dtype.__get__  # type: ignore[attr-defined]


def _in_slot(value: Any, buffer: torch.Tensor, index: int) -> bool:
    """Whether ``value`` is slot ``index`` of ``buffer`` itself: a contiguous
    tensor of its shape and dtype at that slot's address (while the buffer
    is alive, only a view of the slot is there)."""
    return (isinstance(value, torch.Tensor)
            and value.data_ptr() == buffer.data_ptr() + index * buffer.stride(0) * buffer.element_size()
            and value.shape == buffer.shape[1:] and value.dtype == buffer.dtype and value.is_contiguous())


def _placeable(value: Any) -> bool:
    """A CPU tensor of :data:`PLACED_BYTES` or more, contiguous (its view keeps its
    strides), of a type with no attributes of its own, that NumPy can copy."""
    if not isinstance(value, torch.Tensor) or type(value) not in _plain_types():
        return False
    return (value.nbytes >= PLACED_BYTES and value.device.type == "cpu" and value.is_contiguous()
            and not value.requires_grad and not value.is_conj() and not value.is_neg()
            and value.dtype not in (torch.bfloat16,) and value.dim() > 0)


def _plain_types() -> tuple[type, ...]:
    """torch.Tensor and the tv_tensors that carry nothing but their pixels."""
    global _PLAIN
    if _PLAIN is None:
        from torchvision import tv_tensors

        _PLAIN = (torch.Tensor, tv_tensors.Image, tv_tensors.Mask, tv_tensors.Video)
    return _PLAIN


_PLAIN: tuple[type, ...] | None = None


def decoding_into(slot: Slot | None, decode: Callable[[Any], Any], item: Any) -> Any:
    """``decode(item)`` on this decode thread, a JPEG it decodes to planes
    written straight into ``slot`` (if any, and if of the slab's shape)."""
    if slot is None:
        return decode(item)
    planes_into(functools.partial(slot.slab.planes_slot, slot.nth))
    try:
        return decode(item)
    finally:
        planes_into(None)


class StackAhead:
    """One iteration's slabs (see the module's doc). :meth:`slots` runs on
    the decode thread that takes records from the read (one at a time);
    :meth:`skipped` and :meth:`came_out` on the iterating thread as records
    come out; :meth:`Slot.slab.place <_Slab.place>` on the decode threads;
    :meth:`told`, :meth:`whole` and :meth:`collated` in the collate, on the
    thread that iterates the DataLoader (the same thread, with
    ``num_workers=0``). A lock keeps the counts and slabs whole between them."""

    def __init__(self, *, shared: bool = False) -> None:
        self.size = _LAST_SIZE.get()  # B; 0 or 1: unknown, no slots
        self._told = False  # whether this iteration's collate told B yet
        self._handed = 0  # records handed over with a slot asked for
        self._skipped = 0  # of those, skipped when they came out
        self._collated = 0  # items collated so far
        self._out = 0  # items come out so far
        self._slabs: dict[int, _Slab] = {}
        self._memory = _SharedSlabs() if shared else _HeapSlabs()
        self._lock = threading.Lock()

    def close(self) -> None:
        """The iteration is over: of the main process's buffers it used,
        :data:`KEPT_BETWEEN` bytes are kept for the next one (each pass over
        a dataset is a new iteration; one that started with none faulted its
        slabs in afresh); a worker's segments stay in its pool."""
        with self._lock:
            self._slabs.clear()
        self._memory.close()

    def slots(self, count: int) -> list[Slot | None] | None:
        """The slots of the next ``count`` records handed over, in order: each
        None where B is unknown or the slot it would take was given already
        (None: none has one)."""
        with self._lock:
            position = self._handed - self._skipped  # where the first comes out, if none handed before is skipped
            self._handed += count
            size = self.size
            if size < 2 or (not self._told and self._out > size):
                return None  # B unknown; or a batch's worth came out and no collate told B: no DataLoader batches them
            first = self._collated // size  # batches before it were collated already: no record goes there
            slots: list[Slot | None] = []
            for number, index in map(divmod, range(position, position + count), itertools.repeat(size)):
                if number < first:
                    slots.append(None)
                    continue
                slab = self._slabs.get(number)
                if slab is None:
                    slab = self._slabs[number] = _Slab(size, self._memory)
                if index in slab.claimed:
                    slots.append(None)
                    continue
                slab.claimed.add(index)
                slots.append(Slot(slab, index))
            return slots

    def skipped(self) -> None:
        """A record handed over with a slot asked for came out skipped."""
        with self._lock:
            self._skipped += 1

    def came_out(self) -> None:
        """An item with a slot asked for came out. The slabs of batches that
        came out before the last one are let go, collated or not (items
        iterated with no DataLoader: each item keeps its own slab alive, and
        this iteration none)."""
        with self._lock:
            self._out += 1
            if self.size >= 2 and self._out % self.size == 0:
                self._let_go(self._out // self.size - 1)  # not the batch that just came out: its collate is next

    def told(self, size: int) -> None:
        """The collate of ``size`` of this iteration's items: B is the first
        size told, or a larger one (a shorter batch is the epoch's last)."""
        if size < 2 or (self._told and size <= self.size):
            return
        with self._lock:
            self._told = True
            if size != self.size:
                self.size = size
                self._slabs.clear()  # slots of another size: those placed stay with their items
            if size != _LAST_SIZE.get():
                _LAST_SIZE.set(size)

    def whole(self, key: Any, values: list) -> torch.Tensor | None:
        """``torch.stack(values)`` without a copy when ``values`` are, in order,
        every slot of ``key``'s buffer in the slab of the batch being
        collated: the buffer itself (plain tensor, contiguous; in a worker,
        sent over its segment); else None."""
        number = self._collated // self.size if self.size >= 2 else -1
        slab = self._slabs.get(number)
        buffer = None if slab is None else slab.tensors.get(key)
        if buffer is None or len(values) != buffer.shape[0]:
            return None
        if not stacks_to_plain(values[0]):
            return None  # a type torch.stack keeps (tv_tensors' return type setting): the buffer is a plain tensor
        count = len(values)
        if list(map(type, values)).count(type(values[0])) != count or not isinstance(values[0], torch.Tensor):
            return None
        with torch._C.DisableTorchFunctionSubclass():  # the tensor's own methods, not tv_tensors' Python
            start, step = buffer.data_ptr(), buffer[0].nbytes
            # at the slot's address while the buffer is alive: a view of that slot, no other memory;
            # of its shape, strides and type (a view of another shape, at the same address, is not it)
            if (list(map(_DATA_PTR, values)) != list(range(start, start + count * step, step))
                    or list(map(_SIZE, values)).count(buffer.shape[1:]) != count
                    or list(map(_STRIDE, values)).count(buffer.stride()[1:]) != count
                    or list(map(_DTYPE, values)).count(buffer.dtype) != count):
                return None
        assert slab is not None
        return slab.shipped(buffer)

    def collated(self, count: int) -> None:
        """A batch of ``count`` items was collated: the slabs of batches before the next are let go."""
        with self._lock:
            self._collated += count
            if self.size >= 2:
                self._let_go(self._collated // self.size)

    def _let_go(self, below: int) -> None:
        """The slabs of the batches before the ``below``-th let go (the lock held)."""
        for number in [n for n in self._slabs if n < below]:
            del self._slabs[number]
