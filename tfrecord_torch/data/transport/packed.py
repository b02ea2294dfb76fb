"""A worker's batch of lists (``detection_collate``'s) through one reused
shared-memory segment.

:func:`~tfrecord_torch.data.collating.detection_collate` keeps a list per
batch: B images of their own sizes and B target dicts (boxes, labels, masks
[N, H, W], ...). Sent by value (:mod:`.byvalue`), their bytes went through
the worker queue's pipe: for batches of 16 256x256 images with PNG masks,
about 5 MB a batch, read by the main process in 64 KiB pieces. py-spy of 2
workers: a fifth of all samples in the pipe's send and receive, and 2
workers decoded slower than one process (931 images/s against 963).

In a worker it returns a :class:`PackedLists`, the same tuple. Pickled, it
copies the bytes of every tensor it holds into one segment of the worker's
pool (:class:`~.shipped.SharedBuffers`, grown to the batch) and sends where
each lies, with its type and attributes; the segment itself travels once,
as :class:`~.shipped.Shipped` batches do, and is written again only after
the main process let go of every tensor of the batch. The copy is made at
pickling time, so a ``collate_fn`` that edits the tensors in place after
``detection_collate`` sends its edits.

Pickled a second time, a :class:`PackedLists` sends its tensors as they
are (by value where :mod:`.byvalue` marked them). A tensor that is not its
bytes alone (not contiguous, needing gradients, a dtype NumPy lacks) is left
to torch. When every segment of the pool is still held, the batch goes by
value.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from tfrecord_torch.data.transport.byvalue import arrived, bytes_view, own_type
from tfrecord_torch.data.transport.shipped import Layout, SharedBuffers, sent_over

__all__ = ["PackedLists"]

ALIGN = 64  # each tensor's bytes start on a cache line
DEPTH = 3  # (images, targets) -> list -> dict: the containers walked for tensors

_POOL = SharedBuffers()
_ONCE = threading.Lock()


class PackedLists(tuple):
    """A tuple of lists and dicts of tensors that a DataLoader worker sends
    through one reused shared-memory segment; it arrives as a plain tuple."""

    _sent = False

    def __reduce_ex__(self, protocol: Any) -> Any:
        with _ONCE:
            first, self._sent = not self._sent, True
        packed = _pack(tuple(self)) if first else None
        return packed if packed is not None else (tuple, (tuple(self),))


class _Segment:
    """What unpickles, once per message (pickle's memo), into the batch's
    segment as a uint8 tensor; every :class:`_Part` refers to it."""

    def __init__(self) -> None:
        self.reduced: tuple = ()

    def __reduce__(self) -> tuple:
        return self.reduced


class _Part:
    """One tensor of the batch: where its bytes lie in the segment, and what it is."""

    def __init__(self, segment: _Segment, tensor: torch.Tensor, array: np.ndarray, offset: int) -> None:
        self.dtype, self.shape = array.dtype, array.shape
        self.segment, self.offset = segment, offset
        self.cls, self.state = own_type(tensor), dict(tensor.__dict__)

    def __reduce__(self) -> tuple:
        return (_part, (self.segment, self.offset, self.dtype, self.shape, self.cls, self.state))


def _part(segment: torch.Tensor, offset: int, dtype: np.dtype, shape: tuple[int, ...], cls: type,
          state: dict) -> torch.Tensor:
    """In the receiving process: one tensor over the segment's bytes; the
    segment's flag clears when the last of the batch's tensors goes."""
    size = int(np.prod(shape)) * dtype.itemsize
    return arrived(segment.numpy()[offset:offset + size].view(dtype).reshape(shape), cls, state)


def _pack(value: tuple) -> tuple | None:
    """The pickling of ``value`` over a segment, its tensors' bytes copied in;
    None where it goes by value instead (no free segment, nothing to pack)."""
    segment = _Segment()
    arrays: list[tuple[np.ndarray, int]] = []  # each tensor's NumPy view, and its offset in the segment
    end = 0

    def swap(item: Any, depth: int) -> Any:
        nonlocal end
        if isinstance(item, torch.Tensor):
            array = bytes_view(item)
            if array is None:
                return item
            arrays.append((array, end))
            part = _Part(segment, item, array, end)
            end += -(-array.nbytes // ALIGN) * ALIGN
            return part
        if depth and type(item) in (list, tuple):
            return type(item)(swap(v, depth - 1) for v in item)
        if depth and type(item) is dict:
            return {k: swap(v, depth - 1) for k, v in item.items()}
        return item

    structure = swap(value, DEPTH)
    if not arrays:
        return None
    out, token = _POOL.take((max(end, 1),), np.uint8, zero=False, grow=True)
    if token is None:  # every segment still held: by value
        return None
    flat = out.numpy()
    for array, offset in arrays:
        flat[offset:offset + array.nbytes] = array.reshape(-1).view(np.uint8)
    held, flags, slot = token
    # the flag set while ``out`` still holds the array: no other thread can take the slot in between
    segment.reduced = sent_over(held, flags, slot, Layout((max(end, 1),), (1,), 0))
    del out, flat  # the pool's array is written again once the receiver let go and the flag is clear
    return (tuple, (structure,))

