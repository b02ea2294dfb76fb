"""Tensors a receiving process makes over memory torch does not count as shared.

A tensor that a DataLoader worker sends through torch's own machinery
arrives in torch's shared memory: ``share_memory_()`` leaves it where it is,
and sending it on passes the same memory. The batches this package sends
arrive over memory of their own -- a worker's reused segment
(:mod:`.shipped`, :mod:`.packed`) or bytes that came inside the message
(:mod:`.byvalue`, :class:`~.shipped.Inline`) -- as ``torch.from_numpy`` of
it, which torch moves into a new segment of its own on ``share_memory_()``
or when the tensor is sent on (a queue of ``torch.multiprocessing``). The
storage then holds the copy and lets go of the old memory, while the NumPy
arrays, memoryviews and DLPack views taken of the tensor before still point
there: into a segment the worker then writes the next batches into, or
into memory freed.

:func:`received` keeps the old memory alive for as long as the storage
lives, moved or not. torch keeps a storage's Python object for as long as
the storage itself (its tensors and views, and the arrays and DLPack views
taken of them, all hold it), so a finalizer on that object holds the array
until the last of them is gone.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

__all__ = ["received"]


def received(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy(array)``, whose storage holds ``array`` for as long
    as it lives, even once torch moved it into shared memory of its own."""
    tensor = torch.from_numpy(array)
    weakref.finalize(tensor.untyped_storage(), _held, array).atexit = False
    return tensor


def _held(array: np.ndarray) -> None:
    """(the finalizer's) ``array`` was held until the storage went."""
