"""Tensors over memory torch does not count as shared, kept valid when torch moves them.

``share_memory_()``, or sending a tensor on through a queue of
``torch.multiprocessing``, moves a tensor whose memory is not torch's shared
memory into a new segment: the storage then holds the copy and lets go of
the old memory, while the NumPy arrays, memoryviews and DLPack views taken
of the tensor before still point there. This package hands out such tensors
over memory it writes again once let go of: the main process's reused batch
buffers (:mod:`~tfrecord_torch.features.reused`,
:mod:`~tfrecord_torch.data.transport.reuse`), and what a DataLoader worker
sends -- a worker's reused segment, or bytes that came inside the message
(:mod:`~tfrecord_torch.data.transport`); torch's own worker batches, by
contrast, arrive in its shared memory, which ``share_memory_()`` leaves
where it is. A kept array then showed the pixels of a later batch, or read
memory freed.

:func:`tensor_over` keeps the old memory alive for as long as the storage
lives, moved or not. torch keeps a storage's Python object for as long as
the storage itself (its tensors and views, and the arrays and DLPack views
taken of them, all hold it), so a finalizer on that object holds the array
until the last of them is gone.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

__all__ = ["tensor_over"]


def tensor_over(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy(array)``, whose storage holds ``array`` for as long
    as it lives, even once torch moved it into shared memory of its own."""
    tensor = torch.from_numpy(array)
    weakref.finalize(tensor.untyped_storage(), _held, array).atexit = False
    return tensor


def _held(array: np.ndarray) -> None:
    """(the finalizer's) ``array`` was held until the storage went."""
