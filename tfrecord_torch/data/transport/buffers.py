"""The batch engine's buffers at the DataLoader boundary.

Where a batch is decoded decides where its buffer should live: inside a
DataLoader worker, in a shared-memory segment the main process receives
without a copy and the worker writes again once the main process let go
(:mod:`.shipped`); in the main process, in a buffer the caller has let go
of, its pages already mapped (:mod:`.reuse`). The image engine
(:class:`~tfrecord_torch.features.images.engine.DecodeEngine`) knows
neither: it takes one of these as its ``buffers=`` argument (a
:class:`~tfrecord_torch.features.images.engine.BufferProvider`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfrecord_torch._storage import tensor_over
from tfrecord_torch.data.transport.reuse import BufferPool
from tfrecord_torch.data.transport.shipped import SLOTS, SharedBuffers

__all__ = ["BatchBuffers"]


class BatchBuffers:
    """Batch buffers for the process that decodes: shared and sent once in
    a DataLoader worker, reused in place otherwise; safe from several threads.

    Args:
        ahead: batches started ahead of the one taken (batch mode's
            ``prefetch``): so many more buffers are kept for reuse.
    """

    def __init__(self, ahead: int = 0) -> None:
        self._pool = _main_pool(3 + ahead)
        self._shared = _worker_segments(SLOTS + ahead)

    def close(self) -> None:
        """The iteration is over: what its pool keeps for the next one is bounded (:data:`KEPT_BETWEEN`)."""
        self._pool.trim(KEPT_BETWEEN)

    def take(self, shape: tuple[int, ...], dtype: np.dtype | type, zero: bool) -> tuple[torch.Tensor, Any]:
        """A tensor of ``shape`` nobody else refers to (zero-filled if
        ``zero``), and what :meth:`ship` needs to send it."""
        if torch.utils.data.get_worker_info() is not None:  # sent to the main process without a copy
            return self._shared.take(shape, dtype, zero)
        array = self._pool.take(shape, dtype)
        if zero:
            array.fill(0)
        return tensor_over(array), None  # moved into shared memory, it still holds array (_storage)

    def ship(self, batch: torch.Tensor, token: Any) -> torch.Tensor:
        """``batch`` (a view of the taken tensor) as the caller receives it."""
        return self._shared.ship(batch, token)


_SEGMENTS: dict[int, SharedBuffers] = {}
_POOLS: dict[int, BufferPool] = {}
# The batch buffers the main process keeps after an iteration for the next (a pass over a dataset is a
# new iteration), in bytes: 5 batches of 64 500x375 images, 1 of 64 1024x768 images (151 MiB each).
KEPT_BETWEEN = 256 << 20


def _main_pool(keep: int) -> BufferPool:
    """The main process's pool of batch buffers keeping ``keep`` per shape,
    shared by its iterations: the next pass decodes into buffers whose pages
    are mapped already. A forked child starts with none."""
    pool = _POOLS.get(keep)
    if pool is None:  # setdefault: one pool, whichever thread gets here first
        pool = _POOLS.setdefault(keep, BufferPool(keep=keep))
    return pool


def _worker_segments(slots: int) -> SharedBuffers:
    """The process's segments for batches of ``slots`` slots, shared by its
    iterations: a persistent worker's next epoch (a new iteration) writes
    the last one's segments again. One pool per iteration made 6 new segments
    each epoch (36 MB each for 64 500x375 images, the kernel zeroing every
    page), as many as a worker forked anew. Used inside a worker only; a fork
    starts each pool afresh (:class:`SharedBuffers`)."""
    pool = _SEGMENTS.get(slots)
    if pool is None:  # setdefault: one pool, whichever thread gets here first (no lock a fork could inherit held)
        pool = _SEGMENTS.setdefault(slots, SharedBuffers(slots=slots))
    return pool
