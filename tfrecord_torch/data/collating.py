"""default_collate of items, as DataLoader(ds, batch_size=N) runs it.

In the main process (``num_workers=0``) it is
:func:`~tfrecord_torch.features.items.collate_items`, each large tensor
key stacked by :func:`stack_on_this_thread`. In a DataLoader
worker, each key's values are stacked into a shared-memory segment the
worker uses again once the main process let go of the batch
(:class:`~tfrecord_torch.data.transport.stacking.Stacker`), where torch
would make a new segment per tensor per batch; the main process receives the
same plain tensors either way. Either way, values that are, in order, every
slot of their batch's buffer (decoded there:
:mod:`~tfrecord_torch.data.stackahead`) are that buffer, copied nowhere. Registered in torch's
``default_collate_fn_map`` for :class:`~tfrecord_torch.features.items.Item`
when the datasets are imported; a ``collate_fn`` of one's own is not
affected unless it calls default_collate itself.

:func:`detection_collate`, a ``collate_fn`` that keeps a list per batch,
sends all the tensors of a batch in one reused shared-memory segment
(:mod:`~tfrecord_torch.data.transport.packed`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch.utils.data
from torch.utils.data._utils.collate import default_collate_fn_map

from tfrecord_torch._storage import tensor_over
from tfrecord_torch.data.stackahead import StackAhead
from tfrecord_torch.data.transport.byvalue import by_value_in_worker
from tfrecord_torch.data.transport.packed import PackedLists
from tfrecord_torch.data.transport.shipped import INLINE_BYTES, inline_small
from tfrecord_torch.data.transport.stacking import Stacker, stackable_dtype, stacks_to_plain
from tfrecord_torch.data.workerheap import keep_for_batches
from tfrecord_torch.data.workersend import sent
from tfrecord_torch.features.collate import BatchMemory, detection_lists, use_batch_memory
from tfrecord_torch.features.items import Item, collate_items
from tfrecord_torch.features.reused import Reused

__all__ = ["WorkerBatchMemory", "collate_worker_items", "detection_collate", "stack_on_this_thread"]

_STACKER = Stacker()
_GRAIN = 32768  # at::internal::GRAIN_SIZE: torch copies fewer elements than this on the calling thread


def collate_worker_items(batch: list, *, collate_fn_map: dict | None = None) -> dict:
    """default_collate of a batch of items; in a DataLoader worker, over
    reused shared memory."""
    if torch.utils.data.get_worker_info() is None:
        return _collate_with_slots(batch, collate_fn_map, stack_on_this_thread)
    stacked: list[int] = []

    def stack(key: object, values: list) -> torch.Tensor | None:
        out = _STACKER.stack(key, values)
        if out is not None:
            stacked.append(out.nbytes)
        return out

    out = inline_small(_collate_with_slots(batch, collate_fn_map, stack))
    keep_for_batches(sum(stacked))  # before the samples are let go: their heap stays for the next batch
    sent()  # torch puts it in its queue next: the next item starts after a yield (workersend)
    return out


def _collate_with_slots(batch: list, collate_fn_map: dict | None,
                        stack: Callable[[object, list], torch.Tensor | None]) -> dict:
    """collate_items of ``batch``: values that are, in order, every slot of
    their batch's buffer (decoded there: on the main process's decode threads,
    or into a worker's segment) as that buffer, others by ``stack`` (the main
    process: :func:`stack_on_this_thread`; a worker: its shared memory) or as
    default_collate does."""
    owner = _owner(batch)
    if owner is None:
        return collate_items(batch, collate_fn_map=collate_fn_map, stack=stack)
    owner.told(len(batch))

    def placed(key: object, values: list) -> torch.Tensor | None:
        whole = owner.whole(key, values)
        return whole if whole is not None else stack(key, values)

    try:
        return collate_items(batch, collate_fn_map=collate_fn_map, stack=placed)
    finally:
        owner.collated(len(batch))


def _owner(batch: list) -> StackAhead | None:
    """The iteration whose slots the batch's large tensors may be in (None: no slots)."""
    return getattr(batch[0], "stacking", None) if batch and isinstance(batch[0], Item) else None


def detection_collate(batch: list, *, image: str = "image") -> tuple[list, list[dict]]:
    """Collate detection samples into what torchvision's detection models take:
    a list of images and a list of per-image target dicts (``boxes``,
    ``labels`` and every other key), each image keeping its own box count.

    In a DataLoader worker, the tensors of the batch travel in one shared-memory
    segment that the worker uses again once the main process let go of the
    batch (:mod:`~tfrecord_torch.data.transport.packed`), copied in when the
    batch is sent, and arrive as the same types with the same attributes:
    not a shared-memory segment per tensor, whose file descriptor the main
    process fetches in a socket round trip with the worker.

    Returns:
        (images, targets): B tensors [C, H, W] and B dicts.
    """
    images, targets = detection_lists(batch, image=image)
    if torch.utils.data.get_worker_info() is None:
        return images, targets
    # marked by value too: what a collate_fn of the user's takes out of the tuple still travels cheaply
    return PackedLists((by_value_in_worker(images), [by_value_in_worker(target) for target in targets]))


def stack_on_this_thread(key: object, values: list) -> torch.Tensor | None:
    """``torch.stack(values)`` -- the same shape, strides, type and values --
    copied by NumPy on the calling thread into memory used again once no
    earlier batch made there is alive; None (left to default_collate) where
    there are too few elements, for values the worker's stacker leaves too,
    and for values of several strides or that torch.stack would not stack
    contiguously.

    With several torch threads, torch.stack copies each image of a batch on
    its OpenMP team: a fork and a join per image, whose team threads spin
    between the images and, on cores other processes keep busy, leave the
    main thread waiting at each join. The team stays the user's, for the
    model; the batch's copies need none of it. And a batch in fresh memory
    (36 MiB for 64 500x375 images) faults every page in, zeroed by the
    kernel, before the copy writes it: ``num_workers=0`` per sample read
    those photos at 0.84x the rate it reads them with the memory used again
    (:data:`_STACKED`).
    """
    with torch._C.DisableTorchFunctionSubclass():  # tv_tensors' attributes, each a Python call otherwise
        first = values[0]
        if not isinstance(first, torch.Tensor) or first.dim() == 0 or len(values) * first.numel() < _GRAIN:
            return None  # first: a batch of labels is not looked at value by value
        dtype = stackable_dtype(values)
        if dtype is None:
            return None
        strides = first.stride()
        if any(v.stride() != strides or v.is_conj() or v.is_neg() for v in values):  # conj, neg: no NumPy view
            return None
        if not _stacks_contiguously(tuple(first.shape), strides):
            return None
        arrays = [v.numpy() for v in values]
    if not stacks_to_plain(first):
        return None  # a subclass torch.stack keeps (tv_tensors' return type setting)
    shape = (len(values), *first.shape)
    out = _STACKED.take(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)
    np.stack(arrays, out=out)
    return tensor_over(out)  # moved into shared memory, it still holds out (_storage)


# The batches stacked in this process: the one the loop holds and the one being made, each buffer a
# quarter longer than its batch and at most 256 MiB (larger batches get fresh memory: 64 1024x768
# images are 151 MiB, and read 1.11x as fast from here), freed only with the process.
_STACKED = Reused(keep=2, largest=256 << 20)


@functools.lru_cache(maxsize=64)
def _stacks_contiguously(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether torch.stack of tensors of this shape and these strides gives
    a contiguous tensor, worked out from the strides alone: values of 1 or
    2 dimensions always stack contiguously; 3-d ones unless, given their
    leading dimension of 1, they are laid out like channels-last images
    (c10's ``is_channels_last_strides_2d``, which torch.stack's layout
    follows); values of more dimensions count only when contiguous (torch
    keeps other layouts of theirs). The unit tests compare it with
    torch.stack over a grid of layouts. Not worked out by stacking on the
    meta device (a Python reference that imports torch._dynamo: 1-3 s
    before the first batch of a process that had not), nor by a trial stack
    of real tensors (which would start the OpenMP team this copy avoids)."""
    if len(shape) < 3:
        return True
    if len(shape) > 3:  # torch keeps more layouts of these than c10's rule says: only the plain one is known
        return strides == _row_major(shape)
    return not _strides_like_channels_last((1, *shape), (shape[0] * strides[0], *strides))


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _strides_like_channels_last(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """c10's ``is_channels_last_strides_2d_s4``: whether a 4-d tensor of
    these sizes and strides is laid out like a channels-last one."""
    least = 0
    if strides[1] == 0:
        return False
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d] * (sizes[d] if sizes[d] > 1 else 1)
    return True


class WorkerBatchMemory(BatchMemory):
    """:func:`~tfrecord_torch.pad_collate`'s batches in a DataLoader worker:
    each padded batch made over a reused shared-memory segment of its key's
    own (:meth:`Stacker.empty`: a padded batch's shape differs from batch to
    batch, so a segment may be longer than the batch) and its small tensors
    (lengths, sizes) sent by value, where torch would make a new segment for
    each tensor of each batch and pass its file descriptor in a socket round
    trip. In the main process, plain tensors."""

    def empty(self, key: object, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if torch.utils.data.get_worker_info() is not None:
            out = _STACKER.empty(("made", key), shape, dtype)
            if out is not None:
                return out
            return torch.empty(shape, dtype=dtype)
        return super().empty(key, shape, dtype)

    def finish(self, batch: Any) -> Any:
        """``batch`` to send: in a DataLoader worker, each plain contiguous
        tensor of a dict over 64 KiB copied into a reused segment of its key's
        own, the small ones and the tensors of its lists (a batch's values of
        varying length, its boxes) sent by value -- where torch would make a
        new segment for each and pass its descriptor in a socket round trip."""
        if not isinstance(batch, dict) or torch.utils.data.get_worker_info() is None:
            return batch
        return inline_small({key: by_value_in_worker(value) if isinstance(value, list) else _in_segment(key, value)
                             for key, value in batch.items()})


def _in_segment(key: object, value: Any) -> Any:
    """``value``, a plain contiguous CPU tensor over 64 KiB, copied into a
    reused segment (:meth:`Stacker.empty`); anything else, or when every
    segment of the key is still held, ``value`` as it is."""
    if type(value) is not torch.Tensor or value.nbytes <= INLINE_BYTES or value.requires_grad or \
            value.device.type != "cpu" or value.layout != torch.strided or not value.is_contiguous():
        return value
    out = _STACKER.empty(("sent", key), tuple(value.shape), value.dtype)
    if out is None:
        return value
    out.copy_(value)
    return out


default_collate_fn_map[Item] = collate_worker_items
use_batch_memory(WorkerBatchMemory())
