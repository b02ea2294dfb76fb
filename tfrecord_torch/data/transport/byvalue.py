"""Per-sample tensors of a worker's batch sent inside the message, keeping their type.

A ``collate_fn`` that returns lists of tensors, not stacked batches
(``detection_collate``: B images of their own sizes, B target dicts of boxes,
labels, masks ...), hands torch's worker queue many tensors a batch, and
torch moves each into a fresh shared-memory segment whose file descriptor the
main process fetches over a new, authenticated connection to the worker's
resource-sharer thread: for detection batches of 16 with masks, about 110
such round trips a batch, which left the main process waiting on them most of
the time with 2 workers on 2 busy cores (profiled with py-spy: more than the
whole decode of the masks and images in the workers). Up to
:data:`BY_VALUE_BYTES`, copying a tensor's bytes through the queue's pipe
costs less than that round trip.

:func:`by_value` marks such a tensor: it stays a tensor of its own type (a
``tv_tensors.Image``, ``BoundingBoxes`` with its format and canvas size,
``Mask``, or a plain tensor), usable as before in the worker, and arrives in
the main process as that same type with the same attributes, shape, strides
and values. Other values -- larger, not contiguous, on another device,
needing gradients, a dtype NumPy lacks -- are left as they are, for torch's
shared memory.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.utils.data

from tfrecord_torch._storage import tensor_over

__all__ = ["BY_VALUE_BYTES", "arrived", "by_value", "by_value_in_worker", "bytes_view", "own_type"]

BY_VALUE_BYTES = 1 << 22  # 4 MB: a 1024x1024 RGB image; a few copies of it cost less than a descriptor's round trip


def by_value_in_worker(value: Any) -> Any:
    """``value`` (a tensor, or a list or dict of them, one level deep) with
    its tensors marked by :func:`by_value` in a DataLoader worker; elsewhere
    ``value`` itself."""
    if torch.utils.data.get_worker_info() is None:
        return value
    if isinstance(value, dict):
        return {k: by_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [by_value(v) for v in value]
    return by_value(value)


def by_value(value: Any) -> Any:
    """``value`` as a tensor of a subclass of its own type whose pickling
    sends its bytes inside the message; other values as they are."""
    if not isinstance(value, torch.Tensor) or not _sendable(value):
        return value
    carrier = _carrier(type(value))
    out: torch.Tensor = value.as_subclass(carrier)
    out.__dict__.update(value.__dict__)  # tv_tensors' attributes: a BoundingBoxes' format, canvas_size
    return out


def _sendable(value: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunctionSubclass():
        return value.nbytes <= BY_VALUE_BYTES and bytes_view(value) is not None


def bytes_view(value: torch.Tensor) -> np.ndarray | None:
    """``value``'s NumPy view where the tensor is its bytes and nothing else (a
    contiguous CPU tensor needing no gradient, of a dtype NumPy has); else None."""
    with torch._C.DisableTorchFunctionSubclass():  # tv_tensors' attributes, each a Python call otherwise
        if value.requires_grad or value.device.type != "cpu" or value.layout != torch.strided or \
                not value.is_contiguous() or value.is_conj() or value.is_neg():
            return None
        try:
            return value.numpy()
        except (TypeError, RuntimeError):  # a dtype NumPy lacks (bfloat16, complex32, ...)
            return None


def own_type(value: torch.Tensor) -> type:
    """The type ``value`` arrives as: its own, or for a tensor :func:`by_value`
    marked, the type it was marked from."""
    return _CARRIED.get(type(value), type(value))


_CARRIED: dict[type, type] = {}  # carrier -> the type it carries


@functools.lru_cache(maxsize=None)
def _carrier(cls: type) -> type:
    """A subclass of ``cls`` that pickles by value and arrives as ``cls``
    (one per tensor type, made once; never itself pickled by name)."""

    def __reduce_ex__(self: torch.Tensor, protocol: Any) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            array = self.numpy()
        return (arrived, (array, cls, dict(self.__dict__)))

    carrier = type(cls.__name__, (cls,), {"__reduce_ex__": __reduce_ex__, "__module__": __name__,
                                          "__qualname__": f"_carrier.<{cls.__qualname__}>"})
    _CARRIED[carrier] = cls
    return carrier


def arrived(array: np.ndarray, cls: type, state: dict) -> torch.Tensor:
    """In the receiving process: the tensor as its own type, over the bytes
    the message brought (a writable array of their own)."""
    tensor = tensor_over(array)  # its arrays kept valid if torch moves it (share_memory_(), sent on)
    if cls is not torch.Tensor:
        tensor = tensor.as_subclass(cls)
        tensor.__dict__.update(state)
    return tensor
